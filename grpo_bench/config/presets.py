"""Named config presets: calibrated values that several suites share, kept in one place.

A suite names one with the top-level key ``preset: world_calibrated``; its values come first and the
suite's ``base`` refines them (defaults ← preset ← base ← budget ← overrides ← grid ← seed). A cell's
id hashes its resolved config, not where a value came from, so moving values from a suite's base
into a preset keeps every id; changing a preset's value changes the ids of the cells that use it.
"""

from __future__ import annotations

from typing import Any

from grpo_bench.errors import unknown

PRESETS: dict[str, dict[str, Any]] = {
    # What the world suites share: 16x16 videos, 10 sampler steps, lr 1e-4, and the two-stage KL weight
    # (warm-up 0.001 -> 0.1 over 10 updates, a hold at the middle weight 0.01 for kl_window updates whose
    # mean KL becomes the target, then log-proportional feedback;
    # docs/design.md §4). A suite's base refines it, e.g. kl_target_auto: false, kl_target: 0.003.
    # Nothing here is calibrated on a reward (the judge and the oracle are what the suites judge):
    # - lr by the step it produces: at 1e-4 (sage_grpo, P=2, G=8, T=10) the KL between consecutive
    #   policies is 5e-5..2.5e-4 per optimizer step (median 7e-5); at 1e-3, 3e-3..1.2e-1 (median 2e-2);
    # - the KL weight by gradient scales: the policy-gradient norm is ~0.01 and a weight w adds a
    #   KL-gradient norm of ~0.45*w, so 0.001 leaves the KL negligible and 0.1 makes it ~4x the policy
    #   gradient; the target is the KL the run itself reaches over its warm-up.
    "world_calibrated": {
        "video_size": 16,
        "steps": 10,
        "lr": 1.0e-4,
        "kl_adaptive": True,
        "kl_beta_min": 0.001,
        "kl_beta_max": 0.1,
        "kl_warmup": 10,
        "kl_target_auto": True,
        "kl_feedback": "proportional",
    },
}
"""Preset name -> run-config values (any RunConfig key)."""


def preset(name: Any, where: str = "") -> dict[str, Any]:
    """The values of a named preset; an unknown name is one line listing the presets."""
    if not isinstance(name, str) or name not in PRESETS:
        raise unknown("preset", name, PRESETS, where)
    return dict(PRESETS[name])
