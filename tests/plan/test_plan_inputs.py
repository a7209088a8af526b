"""The planner's section (plan/inputs.py ``PlanInputs``): what it holds of a resolved run, and that the plan of it is,
to the last bit, the plan the planner made when it took the whole run config (tests/golden/plan_estimates.json,
written by main at 03569f1: LoRA and full fine-tuning, FSDP2 and Muon, sequence parallelism, the dual KL with its
evaluation and diagnostic cadence, and the embedded world built at random)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from plan_configs import hy
from section_support import plan_of
from support_paths import GOLDEN

from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.config.sections import section
from grpo_bench.models import ModelSection
from grpo_bench.plan.inputs import PlanInputs
from grpo_bench.plan.model_specs import model_spec

CASES = {k: v for k, v in json.loads((GOLDEN / "plan_estimates.json").read_text()).items() if not k.startswith("_")}
BASES = {"hy": hy, "run": RunConfig}


def _exact(value: object) -> object:
    """As JSON holds it (tuples as lists): floats round-trip exactly, so == compares every bit."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_plan_of_the_section_is_the_whole_config_plan_to_the_last_bit(name):
    case = CASES[name]
    cfg = BASES[case["base"]](**case["overrides"])
    assert _exact(dataclasses.asdict(plan_of(cfg, **case["launch"]))) == case["plan"]
    assert _exact(dataclasses.asdict(model_spec(section(cfg, ModelSection)))) == case["spec"]


def test_the_section_holds_the_resolved_run_and_nothing_else():
    cfg = resolve(hy(kl="dual", eval_at=[3], guidance=4.5, lr=3e-4, seed=7))
    inputs = section(cfg, PlanInputs)
    assert inputs.model == section(cfg, ModelSection) and inputs.model.frames == 81 and inputs.model.lora_rank == 64
    assert inputs.update.method_choice.kl == "dual" and inputs.update.micro_batch == 2
    assert inputs.update.method_choice.params == cfg.params  # kl.* / anchor.* as resolve filled them in
    assert inputs.cadence.eval_at == [3] and inputs.guidance == 4.5 and inputs.reward == "videoalign"
    assert inputs.trust_region.anchor_every == cfg.anchor_every
    # what the planner does not read does not reach it: neither the learning rate nor the seed is a plan input
    assert section(resolve(hy(kl="dual", eval_at=[3], guidance=4.5)), PlanInputs) == inputs
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.reward = "pickscore"  # type: ignore[misc]
