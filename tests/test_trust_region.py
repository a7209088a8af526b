"""KL variants, anchors and the adaptive KL weight (DESIGN.md §4)."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_world import TinyModel
from torch import nn

from grpo_bench.core.trust_region import (
    KL_VARIANTS,
    AdaptiveKLWeight,
    Anchors,
    ConstantKLWeight,
    KLInputs,
    KLVariant,
    analytic_kl,
    make_kl,
    make_kl_weight,
)
from grpo_bench.train.config import RunConfig


def _inputs(seed: int = 0, b: int = 5) -> KLInputs:
    g = torch.Generator().manual_seed(seed)
    shape = (b, 3, 2, 4, 4)
    return KLInputs(
        mu=torch.randn(shape, generator=g), logp=torch.randn(b, generator=g), logp_old=torch.randn(b, generator=g),
        mu_old=torch.randn(shape, generator=g),
        mu_ref={"initial": torch.randn(shape, generator=g), "moving": torch.randn(shape, generator=g)},
        var=torch.rand(b, generator=g) + 0.1,
    )


def test_registry_holds_the_five_variants_as_classes():
    assert sorted(KL_VARIANTS.names()) == ["dual", "fixed", "moving", "none", "stepwise"]
    for name in KL_VARIANTS.names():
        assert issubclass(KL_VARIANTS.get(name), KLVariant)
    assert KL_VARIANTS.get("fixed").anchors == ("initial",)
    assert KL_VARIANTS.get("dual").anchors == ("moving",)
    assert KL_VARIANTS.get("stepwise").anchors == ()


def test_analytic_kl_closed_form():
    mu = torch.zeros(2, 3, 1, 2, 2)
    ref = torch.zeros_like(mu)
    ref[0] = 0.5  # every element differs by 0.5: mean (0.25) / (2 var)
    var = torch.tensor([0.25, 1.0])
    torch.testing.assert_close(analytic_kl(mu, ref, var), torch.tensor([0.5, 0.0]))
    assert torch.equal(analytic_kl(mu, mu, var), torch.zeros(2))


def test_each_variant_estimator():
    cfg = RunConfig()
    x = _inputs()
    torch.testing.assert_close(make_kl(RunConfig(kl="fixed"))(x)["kl"], analytic_kl(x.mu, x.mu_ref["initial"], x.var))
    torch.testing.assert_close(make_kl(RunConfig(kl="moving"))(x)["kl"], analytic_kl(x.mu, x.mu_ref["moving"], x.var))
    torch.testing.assert_close(make_kl(RunConfig(kl="stepwise"))(x)["kl"], x.logp_old - x.logp)
    torch.testing.assert_close(make_kl(RunConfig(kl="stepwise", stepwise_estimator="analytic"))(x)["kl"],
                               analytic_kl(x.mu, x.mu_old, x.var))
    assert torch.equal(make_kl(RunConfig(kl="none"))(x)["kl"], torch.zeros(5))
    assert cfg.beta_pos == 1.0 and cfg.beta_vel == 0.1  # DESIGN §4 defaults


@pytest.mark.parametrize("estimator", ["sample", "analytic"])
def test_dual_is_weighted_sum_of_moving_and_stepwise(estimator):
    cfg = RunConfig(kl="dual", beta_pos=0.7, beta_vel=0.3, stepwise_estimator=estimator)
    x = _inputs(1)
    moving = make_kl(RunConfig(kl="moving"))(x)["kl"]
    stepwise = make_kl(RunConfig(kl="stepwise", stepwise_estimator=estimator))(x)["kl"]
    out = make_kl(cfg)(x)
    torch.testing.assert_close(out["kl"], 0.7 * moving + 0.3 * stepwise)
    torch.testing.assert_close(out["kl_moving"], moving)
    torch.testing.assert_close(out["kl_stepwise"], stepwise)


def test_anchor_velocity_is_a_snapshot_of_trainable_params_only():
    model = TinyModel(seed=3)
    model.net.sig.weight.requires_grad_(False)  # a frozen parameter (as the base weights under LoRA)
    frozen_copy = copy.deepcopy(model)
    anchors = Anchors(("initial", "moving"), model, model.net, every=3)
    assert "sig.weight" not in anchors.snapshots["initial"] and "sig.bias" in anchors.snapshots["initial"]
    x, sigma = torch.randn(2, 3, 8, 16, 16), torch.tensor([0.3, 0.9])
    cond = model.encode_prompts(["a red circle moving left", "a blue square moving up"])
    with torch.no_grad():
        assert torch.equal(anchors.velocity("initial")(x, sigma, cond), model.velocity(x, sigma, cond))
        for p in model.net.parameters():
            if p.requires_grad:
                p.add_(0.1)
        v_anchor = anchors.velocity("initial")(x, sigma, cond)
        assert not torch.equal(v_anchor, model.velocity(x, sigma, cond))
        torch.testing.assert_close(v_anchor, frozen_copy.velocity(x, sigma, cond))
        # the model itself is untouched by the anchor call
        assert all(p.requires_grad or torch.equal(p, q) for p, q in zip(model.net.parameters(), frozen_copy.net.parameters()))


def test_moving_anchor_copied_exactly_every_n_steps():
    model = TinyModel(seed=1)
    anchors = Anchors(("initial", "moving"), model, model.net, every=4)
    initial = {k: v.clone() for k, v in anchors.snapshots["initial"].items()}
    param = dict(model.net.named_parameters())
    copied_at, last_copy = [], {k: v.clone() for k, v in initial.items()}
    for step in range(1, 14):
        with torch.no_grad():
            for p in model.net.parameters():
                p.add_(0.01 * step)
        if anchors.after_optimizer_step(step):
            copied_at.append(step)
            last_copy = {k: p.detach().clone() for k, p in param.items()}
        for k in last_copy:
            assert torch.equal(anchors.snapshots["moving"][k], last_copy[k])
            assert torch.equal(anchors.snapshots["initial"][k], initial[k])  # fixed anchor never moves
    assert copied_at == [4, 8, 12]


def test_anchor_state_round_trip():
    model = TinyModel(seed=1)
    anchors = Anchors(("moving",), model, model.net, every=1)
    with torch.no_grad():
        next(model.net.parameters()).add_(1.0)
    anchors.after_optimizer_step(1)
    state = copy.deepcopy(anchors.state_dict())
    other = Anchors(("moving",), TinyModel(seed=1), TinyModel(seed=1).net, every=1)
    other.load_state_dict(state)
    for k in state["snapshots"]["moving"]:
        assert torch.equal(other.snapshots["moving"][k], anchors.snapshots["moving"][k])


def test_adaptive_weight_warmup_values():
    w = AdaptiveKLWeight(beta_min=1e-7, beta_max=1e-5, warmup=4, target=1e-3)
    seen = []
    for _ in range(5):
        seen.append(w.value)
        w.update(1e-3)  # on target: no feedback after the warm-up
    step = (1e-5 - 1e-7) / 4
    assert seen == pytest.approx([1e-7, 1e-7 + step, 1e-7 + 2 * step, 1e-7 + 3 * step, 1e-5], rel=1e-12)
    assert w.value == pytest.approx(1e-5)


def test_adaptive_weight_feedback_direction_and_clamp():
    w = AdaptiveKLWeight(beta_min=1e-7, beta_max=1e-5, warmup=2, target=1.0, window=1)
    for _ in range(2):
        w.update(1.0)
    assert w.value == pytest.approx(1e-5)
    w.update(0.1)  # KL far below target: lower (by at most 2x per update)
    assert w.value == pytest.approx(5e-6)
    w.update(0.4)  # ratio 0.4: proportional, x0.5 bounded -> x0.5
    assert w.value == pytest.approx(2.5e-6)
    w.update(1.2)  # inside the band [0.5, 1.5]: unchanged
    assert w.value == pytest.approx(2.5e-6)
    w.update(1.8)  # above 1.5 x target: raise proportionally (x1.8)
    assert w.value == pytest.approx(4.5e-6)
    w.update(100.0)  # raise at most x2, clamped at beta_max
    assert w.value == pytest.approx(9e-6)
    w.update(100.0)
    assert w.value == pytest.approx(1e-5)
    for _ in range(40):
        w.update(0.0)
    assert w.value == pytest.approx(1e-7)  # clamped at beta_min


def test_adaptive_weight_window_mean_and_state():
    w = AdaptiveKLWeight(beta_min=0.0, beta_max=1.0, warmup=0, target=1.0, window=3)
    assert w.value == 1.0
    for kl in (0.1, 0.1, 2.0):  # window mean 0.733: inside the band after the third
        w.update(kl)
    assert w.value == pytest.approx(0.25)  # 1.0 * 0.5 * 0.5 (means 0.1, 0.1), then unchanged
    clone = AdaptiveKLWeight(beta_min=0.0, beta_max=1.0, warmup=0, target=1.0, window=3)
    clone.load_state_dict(copy.deepcopy(w.state_dict()))
    w.update(5.0)
    clone.update(5.0)
    assert clone.value == w.value and clone.updates == w.updates == 4


def test_make_kl_weight_chooses_by_config():
    assert isinstance(make_kl_weight(RunConfig(kl_adaptive=False, kl_weight=0.3)), ConstantKLWeight)
    c = make_kl_weight(RunConfig(kl_adaptive=False, kl_weight=0.3))
    c.update(99.0)
    assert c.value == 0.3
    assert isinstance(make_kl_weight(RunConfig(kl_adaptive=True)), AdaptiveKLWeight)


def test_functional_call_anchor_keeps_gradients_off():
    model = TinyModel()
    anchors = Anchors(("initial",), model, model.net, every=1)
    assert all(not t.requires_grad for t in anchors.snapshots["initial"].values())
    assert isinstance(anchors._call, nn.Module) and list(anchors._call.parameters()) == list(model.net.parameters())
