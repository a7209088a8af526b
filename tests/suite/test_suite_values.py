"""Real-model suites carry real-model values (docs/real_models.md): no number calibrated on the embedded
world leaks into them, the HunyuanVideo 1.5 suites carry the SAGE-GRPO paper's trust-region numbers, and
no checkpoint that is not guidance-distilled is sampled without classifier-free guidance."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from shipped_suites import shipped

from grpo_bench.config.presets import PRESETS
from grpo_bench.config.run import FIELDS
from grpo_bench.plan.model_specs import real_specs
from grpo_bench.suite.expand import expand

ROOT = Path(__file__).resolve().parents[2]
SPECS = real_specs()
"""models/real_specs.yaml, read once: parsing it per cell cost most of the whole suite's collection time."""
WORLD_TUNED = ("lr", "kl_weight", "kl_beta_min", "kl_beta_max", "kl_target")
"""Fields whose world values were set on the embedded world (config.py's docstrings, presets.py)."""
PAPER = {"kl_beta_min": 1e-7, "kl_beta_max": 1e-5, "kl_target": 1e-5, "beta_pos": 1.0, "beta_vel": 0.1,
         "anchor_every": 10, "kl_schedule_unit": "optimizer_step", "step_every": "minibatch", "minibatches": 1,
         "inner_epochs": 1, "clip_range": 1e-4, "weight_decay": 0.01}
"""The SAGE-GRPO paper's / official code's numbers (scripts/post_train/train_grpo.sh: kl_coef 1e-7, kl_weight
1e-5, dual_kl_moving_weight 1.0, dual_kl_step_weight 0.1, update_ref_model_step 10, clip_range 1e-4;
post_train.py: weight_decay 0.01, and one optimizer step per rollout, its gradients accumulated over every
(sample, timestep) backward: tests/train/test_recipe_schedule.py)."""
FLOW_GRPO_BETA = 0.01
"""FlowGRPO's own constant KL weight (yifan123/flow_grpo config/grpo.py:128 pickscore_sd3: config.train.beta = 0.01),
applied to its own estimator (scripts/train_sd3.py:895: / (2 std_dev_t^2), no Delta: KL variant ``flow_grpo``)."""


def _world_values() -> dict[str, set]:
    """Each world-tuned field's world values: the RunConfig default and the world_calibrated preset's."""
    out = {}
    for name in WORLD_TUNED:
        f = FIELDS[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out[name] = {default} | ({PRESETS["world_calibrated"][name]} if name in PRESETS["world_calibrated"] else set())
    return out


def _real_cells():
    for name, suite in shipped().items():
        for cell in expand(suite):
            if cell.config.model in SPECS:
                yield name, cell.config


REAL = list(_real_cells())


def test_there_are_real_model_suites():
    assert {suite for suite, _ in REAL} >= {"hunyuan15_paper", "hunyuan15_main_table", "wan_small"}


@pytest.mark.parametrize("suite", sorted({s for s, _ in REAL}))
def test_no_world_calibrated_value_leaks_into_a_real_model_suite(suite):
    world = _world_values()
    for _, cfg in (c for c in REAL if c[0] == suite):
        used = {"lr"} | ({"kl_beta_min", "kl_beta_max"} if cfg.kl_adaptive else {"kl_weight"})
        if cfg.kl_adaptive and not cfg.kl_target_auto:
            used.add("kl_target")
        if cfg.kl == "none":  # no trust region: only the lr acts
            used = {"lr"}
        for name in sorted(used):
            assert getattr(cfg, name) not in world[name], (
                f"{suite}: {name} = {getattr(cfg, name)} is the embedded world's value ({sorted(world[name])})")


@pytest.mark.parametrize("suite", sorted({s for s, c in REAL if SPECS[c.model]["family"] == "hunyuan15"}))
def test_hunyuan_suites_carry_the_papers_trust_region(suite):
    for _, cfg in (c for c in REAL if c[0] == suite):
        got = {k: getattr(cfg, k) for k in PAPER}
        if cfg.method == "flow_grpo":  # FlowGRPO's own constant beta on its fixed reference
            assert (cfg.kl, cfg.kl_adaptive, cfg.kl_weight) == ("flow_grpo", False, FLOW_GRPO_BETA), suite
            got.update({k: PAPER[k] for k in ("kl_beta_min", "kl_beta_max", "kl_target")})  # unused there
        assert got == PAPER, f"{suite}: {cfg.method} kl={cfg.kl}"


def test_every_real_flow_grpo_cell_runs_flow_grpos_own_kl_at_its_beta():
    """FlowGRPO's beta on the harness's ``fixed`` estimator would be 1/Delta (5.6-28x at 10 steps) stronger."""
    flow = [(suite, cfg) for suite, cfg in REAL if cfg.method == "flow_grpo"]
    assert {suite for suite, _ in flow} >= {"sd35_flow_grpo", "sd35_flow_grpo_1gpu", "hunyuan15_paper", "wan_small"}
    for suite, cfg in flow:
        assert (cfg.kl, cfg.kl_adaptive, cfg.kl_weight) == ("flow_grpo", False, FLOW_GRPO_BETA), suite
    fair = {cfg.kl for suite, cfg in REAL if suite.startswith("sd35_")}
    assert fair == {"flow_grpo"}  # the SD3.5 fair block shares FlowGRPO's trust region


def test_the_paper_suite_trains_with_muon():
    for suite, cfg in REAL:
        assert cfg.optimizer == ("muon" if suite == "hunyuan15_paper" else "adamw"), suite


def test_no_checkpoint_that_is_not_guidance_distilled_runs_without_guidance():
    for suite, cfg in REAL:
        if not SPECS[cfg.model].get("guidance_distilled", False):
            assert cfg.guidance > 1.0, f"{suite}: {cfg.model} sampled at guidance {cfg.guidance}"


def test_world_values_are_found_where_they_are_used():
    """The check above can fail: a real cell given the world's KL range is caught."""
    suite, cfg = REAL[0]
    leaked = dataclasses.replace(cfg, kl_beta_min=PRESETS["world_calibrated"]["kl_beta_min"])
    assert leaked.kl_beta_min in _world_values()["kl_beta_min"]
