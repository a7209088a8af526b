"""A test's run config handed to what takes a section of it (config/sections.py ``section``), one call each, so that
every call site stays one line: the planner's ``PlanInputs`` and the generator a config names. Shared by the test
modules and the scripts tests launch (they run from tests/_support, on the path)."""

from __future__ import annotations

from typing import Any

from grpo_bench import models
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.config.sections import section
from grpo_bench.plan.estimate import Plan, estimate
from grpo_bench.plan.inputs import PlanInputs


def plan_of(cfg: RunConfig, **launch: Any) -> Plan:
    """``estimate`` of ``cfg`` resolved, as the commands plan a run (``launch``: processes, sharding, tflops, spec)."""
    return estimate(section(resolve(cfg), PlanInputs), **launch)


def model_of(cfg: RunConfig) -> Any:
    """The pretrained generator ``cfg`` names, set up by its model section, as the trainer builds it."""
    return models.from_section(section(cfg, models.ModelSection))
