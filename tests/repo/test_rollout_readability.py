"""benchmarks/rollout_readability.py: each kernel's rollouts scored by the task's exact checker from one shared
starting noise, so a kernel at noise level 0 (the ODE) scores exactly as the ODE does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grpo_bench.image_world.words import prompt_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import rollout_readability  # noqa: E402


@pytest.mark.parametrize("task", ["text", "compositional"])
def test_a_kernel_at_level_zero_scores_as_the_ode(task, monkeypatch):
    model, train, check = rollout_readability.task(task)
    few = [prompt_of(w) for w in ("cat", "stone")] if task == "text" else train[:2]
    monkeypatch.setattr(rollout_readability, "task", lambda name: (model, few, check))
    monkeypatch.setattr(rollout_readability, "KERNELS", [("ode", 0.0), ("flow", 0.0), ("flow", 0.7)])
    rows = rollout_readability.readability(task, per_prompt=2, seed=3, steps=4)
    assert rows[("flow", 0.0)] == rows[("ode", 0.0)]
    assert rows[("flow", 0.7)] != rows[("ode", 0.0)]  # the noise reaches the samples
    assert all(0.0 <= v <= 1.0 for row in rows.values() for v in row.values())
