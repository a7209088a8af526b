"""Updates that land (grpo_bench/train/landing.py): bf16 weights that an AdamW step of a small lr cannot
move are predicted in closed form, warned about, and measured per update as ``weights_changed``."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from grpo_bench.config.run import from_dict
from grpo_bench.train import landing
from grpo_bench.train.trainer import train


@pytest.mark.parametrize("lr", [1e-5, 3e-4])
def test_movable_predicts_one_adamw_step_on_bf16_weights(lr):
    w = torch.logspace(-6, 1, 4001).to(torch.bfloat16)
    w = torch.cat([w, -w, torch.zeros(3, dtype=torch.bfloat16)])
    p = torch.nn.Parameter(w.clone())
    p.grad = torch.ones_like(p)
    torch.optim.AdamW([p], lr=lr, weight_decay=0.0).step()
    changed, predicted = p.detach() != w, landing.movable(w, lr, 8)
    # exact except at powers of two stepped towards zero (the spacing below 2^e is half the one above)
    power_of_two = torch.frexp(w.float()).mantissa.abs() == 0.5
    assert torch.equal(changed[~power_of_two], predicted[~power_of_two])
    assert 0.1 < predicted.float().mean() < 0.9


def test_movable_share_of_normal_weights_closed_form():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(1 << 16, generator=g) * 0.02).to(torch.bfloat16)
    share = landing.movable_share([w], 1e-5)
    # P(|w| < 2^8 lr) for N(0, 0.02^2) is erf(2.56e-3 / (0.02 sqrt 2)) = 0.102; binades below the bound
    # [2^-9, 2.56e-3) also move (the test above), so the share lies between that and P(|w| < 2^-8).
    lo, hi = torch.erf(torch.tensor(2.56e-3 / (0.02 * 2**0.5))), torch.erf(torch.tensor(2**-8 / (0.02 * 2**0.5)))
    assert float(lo) - 0.01 < share < float(hi) + 0.01
    assert landing.movable_share([w.float()], 1e-5) is None  # float32 weights: nothing to warn about
    assert landing.precision_warning([w], 1e-5) is not None
    assert landing.precision_warning([w], 1e-2) is None


def _run(tmp_path, model, param_dtype, **kw):
    cfg = dict(model=model, method="sage_grpo", updates=2, reward="world_oracle", lr=1e-5, prompts_per_update=1,
               group_size=4, threads=1, eval_every=100, eval_samples=1, diag_every=0, checkpoint_every=100,
               save_videos=False, device="cpu")
    if model != "world":
        cfg.update(eval_oracle=False, lora_rank=0, mixed_precision="bf16", param_dtype=param_dtype)
    cfg.update(kw)
    out = tmp_path / f"{model}-{param_dtype}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(from_dict(cfg), out)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    landed = [str(w.message) for w in caught if "weights_changed" in str(w.message) or "round back" in str(w.message)]
    return [r["weights_changed"] for r in rows], landed


@pytest.mark.parametrize("model", ["tiny-hunyuan15", "tiny-wan"])
def test_bf16_parameters_at_lr_1e5_are_caught_and_fp32_masters_are_not(tmp_path, model, fresh_accelerate_state):
    bf16, bf16_warnings = _run(tmp_path, model, "bf16")
    fp32, fp32_warnings = _run(tmp_path, model, "float32")
    assert max(bf16) < landing.WEIGHTS_CHANGED_WARN < min(fp32)
    assert any("weights_changed" in w for w in bf16_warnings) and any("round back" in w for w in bf16_warnings)
    assert fp32_warnings == []
    assert min(fp32) > 0.99  # float32 masters: every element a gradient reaches moves


def test_world_logs_weights_changed(tmp_path):
    changed, caught = _run(tmp_path, "world", "float32", lr=1e-4)
    assert all(0.5 < c <= 1.0 for c in changed) and caught == []


def test_a_detached_loss_is_a_no_op_that_warns_every_update(tmp_path, monkeypatch):
    """No gradient reaches a parameter: weights_changed is NaN, and each such update says so."""
    from grpo_bench.train import optimize

    real = optimize.step_terms

    def detached(*args, **kw):
        terms = real(*args, **kw)
        terms.policy = terms.policy.detach().requires_grad_()  # a loss that reaches no parameter
        terms.kl = {k: v.detach() for k, v in terms.kl.items()}
        return terms

    monkeypatch.setattr(optimize, "step_terms", detached)
    changed, caught = _run(tmp_path, "world", "float32", lr=1e-4, kl="none")
    assert all(c is None or c != c for c in changed), changed  # NaN (null in metrics.jsonl): nothing reached
    assert sum("no-op" in w and "no gradient reached" in w for w in caught) == 2  # once per update


def test_an_update_that_changes_nothing_it_reached_warns():
    p = torch.nn.Parameter(torch.ones(8))
    probe = landing.WeightProbe([p])
    probe.begin()
    p.grad = torch.ones(8)
    probe.touch()  # reached, but never stepped
    with pytest.warns(UserWarning, match="no-op: its optimizer steps changed none"):
        assert probe.end() == 0.0
