"""FlowGRPO's training forward under guidance detaches the unconditional half (yifan123/flow_grpo
scripts/train_sd3.py:190): the value of v_u + g (v_c - v_u) is unchanged, its gradient is g dv_c instead of
g dv_c + (1 - g) dv_u. ``detach_uncond`` sets it for a run (core/sampling.py ``guided_velocity``)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_run import tiny
from tiny_world import TinyModel, TinyReward

from grpo_bench.core.sampling import guided_velocity
from grpo_bench.train.trainer import train
from grpo_bench.world.vocab import prompts

G = 4.5


def _grads(model: TinyModel, out: torch.Tensor) -> torch.Tensor:
    params = list(model.net.parameters())
    return torch.cat([g.flatten() for g in torch.autograd.grad(out, params)])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_the_detached_gradient_is_g_times_the_conditional_ones():
    model = TinyModel(seed=0)
    g = torch.Generator().manual_seed(0)
    x, sigma = torch.randn(2, 3, 8, 16, 16, generator=g), torch.tensor([0.7, 0.4])
    cond, null = model.encode_prompts(prompts("train")[:2]), model.null_cond(2)
    probe = torch.randn(2, 3, 8, 16, 16, generator=g)  # a fixed direction: d <probe, v>

    def scalar(v):
        return (probe * v).sum()

    d_cond = _grads(model, scalar(model.velocity(x, sigma, cond)))
    d_null = _grads(model, scalar(model.velocity(x, sigma, null)))
    v_full = guided_velocity(model.velocity, x, sigma, cond, null, G)
    full = _grads(model, scalar(v_full))
    v_det = guided_velocity(model.velocity, x, sigma, cond, null, G, detach_null=True)
    detached = _grads(model, scalar(v_det))
    assert torch.equal(v_full, v_det)  # the same velocity
    assert _rel(detached, G * d_cond) < 1e-5  # float32 sums of the doubled batch in another order
    assert _rel(full, G * d_cond + (1 - G) * d_null) < 1e-5
    assert (full - detached).norm() > 0.1 * detached.norm()  # -3.5 dv_u is no rounding


def _first_update(tmp_path, detach: bool) -> dict:
    cfg = tiny(method="flow_grpo", steps=4, updates=1, minibatches=1, diag_every=1, save_videos=False,
               kl_adaptive=False, kl_weight=0.1, guidance=G, detach_uncond=detach)
    out = tmp_path / f"detach-{detach}"
    train(cfg, out, model=TinyModel(seed=0), reward=TinyReward())
    return json.loads((out / "metrics.jsonl").read_text().splitlines()[0])


def test_a_run_detaches_in_training_only(tmp_path):
    on, off = _first_update(tmp_path, True), _first_update(tmp_path, False)
    assert on["reward"] == off["reward"]  # the same rollouts: sampling does not see the option
    assert on["policy_loss"] == pytest.approx(off["policy_loss"], abs=1e-9)  # the same loss value
    grads_on = [g for g in on["grad_norm_per_step"] if g is not None]
    grads_off = [g for g in off["grad_norm_per_step"] if g is not None]
    assert all(abs(a - b) > 1e-3 * b for a, b in zip(grads_on, grads_off))  # another gradient at every step
