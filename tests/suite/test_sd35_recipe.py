"""The SD3.5 FlowGRPO suites end their schedule as flow_grpo's does: flow_grpo samples on the pipeline's sigmas
(FlowMatchEulerDiscreteScheduler(shift=3.0).set_timesteps(10), whose last step runs 0.0089 -> 0) with its SDE
(yifan123/flow_grpo@ac4c86e flow_grpo/diffusers_patch/sd3_sde_with_logprob.py:47-52), so its last step draws noise
of std 0.0063; the harness's spacing ends 0.25 -> 0, std 0.20 there, so the suites make that step the ODE step
(``window: [0, 9]``) and still train steps 0..8 (timestep_fraction 0.99). They also detach the unconditional
half in training (scripts/train_sd3.py:190)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from grpo_bench.core import schedule
from grpo_bench.core.method import make_method
from grpo_bench.core.sampling import StepTable
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite

ROOT = Path(__file__).resolve().parents[2]
SUITES = ("sd35_flow_grpo", "sd35_flow_grpo_1gpu")


def flow_grpo_last_std(steps: int = 10, shift: float = 3.0, noise_level: float = 0.7) -> float:
    """std of flow_grpo's last transition: std_dev_t * sqrt(-dt) on the scheduler's own sigmas."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(shift=shift)
    sched.set_timesteps(steps)
    sigma, sigma_next = float(sched.sigmas[-2]), float(sched.sigmas[-1])
    return math.sqrt(sigma / (1 - sigma)) * noise_level * math.sqrt(sigma - sigma_next)


def test_flow_grpos_last_step_is_nearly_deterministic_and_the_harness_spacings_is_not():
    assert flow_grpo_last_std() == pytest.approx(0.0063, abs=1e-4)
    table = StepTable.build(make_method("flow_grpo", noise_level=0.7), schedule.sigmas(10, 3.0))
    assert float(table.std[-1]) == pytest.approx(0.7 * math.sqrt(0.25 / 0.75 * 0.25), rel=1e-5)  # 0.20


@pytest.mark.parametrize("suite", SUITES)
def test_the_sd35_suites_sample_the_last_step_without_noise_and_train_steps_0_to_8(suite):
    cells = expand(load_suite(ROOT / "suites" / f"{suite}.yaml"))
    assert {c.config.method for c in cells} == {"dance_grpo", "flow_grpo", "cps", "sage_grpo"}
    for cell in cells:
        cfg = cell.config
        assert cfg.detach_uncond and cfg.guidance == 4.5, cell.id
        method = make_method(cfg.method, **cfg.method_overrides())
        sigmas = schedule.sigmas(cfg.steps, cfg.shift)
        table = StepTable.build(method, sigmas)
        assert float(table.std[-1]) == 0.0 and not bool(table.sde[-1]), (cfg.method, cell.id)
        assert bool((table.std[:-1] > 0).all()), cfg.method  # steps 0..8 stochastic
        trained = method.train_steps(sigmas, 2, torch.Generator().manual_seed(0))
        assert trained.tolist() == [list(range(9))] * 2, cfg.method  # int(10 * 0.99) = 9 steps, as flow_grpo
