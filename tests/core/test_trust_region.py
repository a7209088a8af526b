"""KL variants, anchors and the adaptive KL weight (docs/design.md §4)."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import pytest
import torch
from tiny_world import TinyModel
from torch import nn

from grpo_bench.config.run import RunConfig, TrustRegion
from grpo_bench.core.anchors import Anchors, make_anchor_policy
from grpo_bench.core.kl_weight import AdaptiveKLWeight, ConstantKLWeight, KLWeightOptions, make_kl_weight
from grpo_bench.core.trust_region import KL_VARIANTS, TRUST_REGION_KEYS, KLInputs, analytic_kl, make_kl
from grpo_bench.errors import UserError


def _policies(every: int, *names: str) -> dict:
    """'initial' never moves, 'moving' is copied every N optimizer steps (the shipped variants' anchors)."""
    kinds = {"initial": "never", "moving": "every"}
    return {n: make_anchor_policy(kinds[n], TrustRegion(anchor_every=every)) for n in names}


def _reference_kl(mu, mu_ref, var):
    """KL(N(mu, var) || N(mu_ref, var)) per element from torch.distributions, averaged per sample."""
    std = var.sqrt().view(-1, *([1] * (mu.ndim - 1))).expand_as(mu)
    kl = torch.distributions.kl_divergence(torch.distributions.Normal(mu, std), torch.distributions.Normal(mu_ref, std))
    return kl.flatten(1).mean(1)


def _inputs(seed: int = 0, b: int = 5) -> KLInputs:
    g = torch.Generator().manual_seed(seed)
    shape = (b, 3, 2, 4, 4)
    return KLInputs(
        mu=torch.randn(shape, generator=g), logp=torch.randn(b, generator=g), logp_old=torch.randn(b, generator=g),
        mu_old=torch.randn(shape, generator=g),
        mu_ref={"initial": torch.randn(shape, generator=g), "moving": torch.randn(shape, generator=g)},
        var=torch.rand(b, generator=g) + 0.1,
    )


@pytest.mark.parametrize("name, anchors", [
    ("none", {}), ("fixed", {"initial": "never"}), ("stepwise", {}), ("moving", {"moving": "every"}),
    ("dual", {"moving": "every"}),
])
def test_shipped_variants_anchor_policies_follow_design(name, anchors):
    """docs/design.md §4: pi_0 is never updated, the moving anchor is copied every N optimizer steps."""
    assert dict(KL_VARIANTS.get(name).anchors) == anchors


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
    torch.testing.assert_close(make_kl(RunConfig(kl="fixed"))(x)["kl"], _reference_kl(x.mu, x.mu_ref["initial"], x.var))
    torch.testing.assert_close(make_kl(RunConfig(kl="moving"))(x)["kl"], _reference_kl(x.mu, x.mu_ref["moving"], x.var))
    torch.testing.assert_close(make_kl(RunConfig(kl="stepwise"))(x)["kl"], x.logp_old - x.logp)  # seed eq. 15
    torch.testing.assert_close(make_kl(RunConfig(kl="stepwise", stepwise_estimator="analytic"))(x)["kl"],
                               _reference_kl(x.mu, x.mu_old, x.var))
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
    anchors = Anchors(_policies(3, "initial", "moving"), model, model.net)
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
        assert all(
            p.requires_grad or torch.equal(p, q) for p, q in zip(model.net.parameters(), frozen_copy.net.parameters())
        )


def test_moving_anchor_copied_exactly_every_n_steps():
    model = TinyModel(seed=1)
    anchors = Anchors(_policies(4, "initial", "moving"), model, model.net)
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
    anchors = Anchors(_policies(1, "moving"), model, model.net)
    with torch.no_grad():
        next(model.net.parameters()).add_(1.0)
    anchors.after_optimizer_step(1)
    state = copy.deepcopy(anchors.state_dict())
    other = Anchors(_policies(1, "moving"), TinyModel(seed=1), TinyModel(seed=1).net)
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


def test_a_kl_variant_keeps_only_its_trust_region_of_a_whole_run_config():
    """Given a whole run config (planning and ``resolve`` do), make_kl keeps the trust region's fields alone: the
    variant, and the anchor policies it builds from what it keeps, hold no lr, model or steps of the run."""
    variant = make_kl(RunConfig(kl="dual", beta_pos=0.7, anchor_every=4, lr=1e-2, model="world"))
    assert set(vars(variant.cfg)) == set(TRUST_REGION_KEYS) | {"kl", "params"}
    assert set(TRUST_REGION_KEYS) == {f.name for f in dataclasses.fields(TrustRegion)}  # the section, all of it
    assert variant.cfg.beta_pos == 0.7 and variant.anchor_policies()["moving"].every == 4


@pytest.mark.parametrize("adaptive", [True, False])
def test_the_kl_weight_reads_its_declared_options_only(adaptive):
    """make_kl_weight built from exactly the keys ``KLWeightOptions`` declares is the weight a whole config
    builds: it reads nothing else of the run."""
    whole = RunConfig(kl_adaptive=adaptive, kl_weight=0.3, kl_warmup=3, kl_feedback="ziegler", kl_horizon=4.0,
                      kl_target_auto=True, kl_window=2, kl_beta_min=1e-4, kl_beta_max=0.2, kl_target=0.01)
    declared = SimpleNamespace(**{key: getattr(whole, key) for key in KLWeightOptions.__annotations__})
    own, reference = make_kl_weight(declared), make_kl_weight(whole)
    assert type(own) is type(reference) and own.state_dict() == reference.state_dict()
    for kl in (0.5, 0.001, 0.02, 0.3):  # the same weight through warm-up and feedback
        own.update(kl)
        reference.update(kl)
        assert own.value == reference.value and own.state_dict() == reference.state_dict()


def test_functional_call_anchor_keeps_gradients_off():
    model = TinyModel()
    anchors = Anchors(_policies(1, "initial"), model, model.net)
    assert all(not t.requires_grad for t in anchors.snapshots["initial"].values())
    assert isinstance(anchors._call, nn.Module) and list(anchors._call.parameters()) == list(model.net.parameters())


def test_an_anchor_policy_keeps_what_it_reads_of_its_section_and_nothing_else():
    """Built from the trust region's section (or a whole run config: the same), a policy keeps its own
    parameters and the one setting it reads (the moving anchor's N), never the section it was given."""
    for options in (TrustRegion(anchor_every=3, beta_pos=0.7), RunConfig(anchor_every=3, lr=1e-2)):
        every, ema = make_anchor_policy("every", options), make_anchor_policy("ema", options, {"tau": 0.5})
        assert vars(every) == {"params": every.params, "every": 3}
        assert vars(ema) == {"params": ema.params} and ema.params.tau == 0.5
    policies = make_kl(TrustRegion(anchor_every=4), kind="dual", params={"anchor.tau": 0.5}).anchor_policies()
    assert set(policies) == {"moving"} and policies["moving"].every == 4  # a key of another policy is left alone
    assert make_anchor_policy("every").every == TrustRegion().anchor_every  # no section: the section's default


@pytest.mark.parametrize("every", [0, -2, 2.5, True])
def test_a_bad_anchor_every_is_one_line_naming_the_key(every):
    with pytest.raises(UserError, match=rf"anchor policy 'every': trust_region key 'anchor_every' must be an "
                                        rf"integer >= 1, got {every!r}"):
        make_anchor_policy("every", TrustRegion(anchor_every=every))


def test_ema_anchor_follows_the_closed_form():
    """anchor_k = p + tau^k (anchor_0 - p) for a constant policy p, after k optimizer steps."""
    model = TinyModel(seed=1)
    tau = 0.8
    anchors = Anchors({"ema": make_anchor_policy("ema", TrustRegion(), {"tau": tau})}, model, model.net)
    start = {k: v.clone() for k, v in anchors.snapshots["ema"].items()}
    with torch.no_grad():
        for p in model.net.parameters():
            p.add_(0.5)
    target = {n: p.detach().clone() for n, p in model.net.named_parameters()}
    for k in range(1, 5):
        assert anchors.after_optimizer_step(k)
        for n in start:
            torch.testing.assert_close(anchors.snapshots["ema"][n], target[n] + tau**k * (start[n] - target[n]))


@pytest.mark.parametrize("kl, ref, anchors", [
    ("stepwise", "previous", {"previous": "previous"}),
    ("dual", "previous", {"moving": "every", "previous": "previous"}),
    ("stepwise", "rollout", {}), ("dual", "rollout", {"moving": "every"}),
])
def test_stepwise_ref_chooses_the_velocity_anchor(kl, ref, anchors):
    variant = make_kl(RunConfig(kl=kl, stepwise_ref=ref))
    assert variant.anchors == anchors
    live = {a for a, p in variant.anchor_policies().items() if p.live}
    assert live == ({"previous"} if ref == "previous" else set())


def test_previous_anchor_is_the_policy_before_the_last_optimizer_step():
    """Loss of step s compares pi_{s-1} with pi_{s-2}: the anchor must be the parameters just before each step."""
    model = TinyModel(seed=2)
    anchors = Anchors({"previous": make_anchor_policy("previous")}, model, model.net)
    assert anchors.live_names == ("previous",) and anchors.stored_names == ()
    x, sigma = torch.randn(2, 3, 8, 16, 16), torch.tensor([0.4, 0.8])
    cond = model.encode_prompts(["a red circle moving left", "a blue square moving up"])
    history = []
    for step in range(1, 4):
        history.append(copy.deepcopy(model))  # the parameters this step starts from
        anchors.before_optimizer_step()
        with torch.no_grad():
            for p in model.net.parameters():
                p.add_(0.05 * step)  # "the optimizer step"
        anchors.after_optimizer_step(step)
        with torch.no_grad():
            v_anchor = anchors.velocity("previous")(x, sigma, cond)
            torch.testing.assert_close(v_anchor, history[-1].velocity(x, sigma, cond))
            assert not torch.allclose(v_anchor, model.velocity(x, sigma, cond))


def test_previous_stepwise_kl_is_analytic_on_the_anchor_mean():
    inp = _inputs(4)
    inp.mu_ref["previous"] = torch.randn_like(inp.mu)
    kl = make_kl(RunConfig(kl="stepwise", stepwise_ref="previous"))(inp)["kl"]
    torch.testing.assert_close(kl, _reference_kl(inp.mu, inp.mu_ref["previous"], inp.var))


def test_auto_target_is_the_warmup_kl_and_the_weight_moves_both_ways():
    w = AdaptiveKLWeight(beta_min=1e-3, beta_max=1e-1, warmup=3, target=1.0, window=3, auto_target=True)
    for kl in (0.01, 0.02, 0.03):
        w.update(kl)
    assert w.target == pytest.approx(0.02) and w.value == pytest.approx(0.1)  # end of warm-up: beta_max
    w.update(0.001)  # window mean (0.02 + 0.03 + 0.001) / 3 = 0.017: factor sqrt(0.85) (no dead band)
    assert w.value == pytest.approx(0.1 * (0.051 / 3 / 0.02) ** 0.5)
    w.update(0.001)
    w.update(0.001)  # window mean 0.001: ratio 0.05, factor clamped to 1/2
    expected = 0.1 * (0.051 / 3 / 0.02) ** 0.5 * (0.032 / 3 / 0.02) ** 0.5 * 0.5
    assert w.value == pytest.approx(expected)
    w.update(0.1)  # window mean 0.034: ratio 1.7, raise by sqrt(1.7)
    assert w.value == pytest.approx(expected * (0.102 / 3 / 0.02) ** 0.5)
    clone = AdaptiveKLWeight(beta_min=1e-3, beta_max=1e-1, warmup=3, target=1.0, window=3, auto_target=True)
    clone.load_state_dict(w.state_dict())
    assert clone.target == w.target and clone.value == w.value


def test_auto_target_ignores_a_zero_warmup_kl():
    w = AdaptiveKLWeight(beta_min=1e-3, beta_max=1e-1, warmup=2, target=0.5, window=2, auto_target=True)
    w.update(0.0)
    w.update(0.0)
    assert w.target == 0.5  # a KL that never moved cannot be the target: the configured one stays


def _midpoint_weight(warmup: int = 2, window: int = 3) -> AdaptiveKLWeight:
    return AdaptiveKLWeight(beta_min=1e-3, beta_max=1e-1, warmup=warmup, target=1.0, window=window,
                            auto_target=True, feedback="proportional")


def test_midpoint_target_is_the_mean_kl_of_a_hold_at_the_middle_weight():
    w = _midpoint_weight()
    seen = []
    for kl in (5.0, 5.0, 0.02, 0.04, 0.06):  # the warm-up's KL (5.0) must not enter the target
        seen.append(w.value)
        w.update(kl)
    middle = (1e-3 * 1e-1) ** 0.5
    assert seen == pytest.approx([1e-3, 1e-3 + (1e-1 - 1e-3) / 2, middle, middle, middle])
    assert w.target == pytest.approx(0.04)  # (0.02 + 0.04 + 0.06) / 3: the hold's KL only
    assert w.value == pytest.approx(middle)  # the first feedback is on target: ratio 1
    w.update(0.13)  # window (0.04, 0.06, 0.13): the weight is the middle one times the KL's ratio
    assert w.value == pytest.approx(middle * (0.23 / 3) / 0.04)
    for _ in range(3):
        w.update(0.04)
    assert w.value == pytest.approx(middle)  # proportional, not integral: back on target, back in the middle
    for _ in range(3):
        w.update(4.0)
    assert w.value == pytest.approx(1e-1)  # 100x the target: clamped at the ceiling


def test_midpoint_hold_without_warmup_starts_at_the_first_update_and_survives_a_checkpoint():
    w = _midpoint_weight(warmup=0, window=2)
    assert w.value == pytest.approx(0.01)
    w.update(0.3)
    clone = _midpoint_weight(warmup=0, window=2)
    clone.load_state_dict(copy.deepcopy(w.state_dict()))
    for m in (w, clone):
        m.update(0.5)
    assert w.target == clone.target == pytest.approx(0.4) and w.value == clone.value == pytest.approx(0.01)
    for m in (w, clone):
        m.update(0.7)
    assert w.value == clone.value == pytest.approx(0.01 * 0.6 / 0.4)


def test_proportional_weight_stays_inside_its_range_and_moves():
    # KL = 1e-3 * weight^-0.2 (about the slope between constant weights 0.001 and 0.1 on the world),
    # times +-60% noise: the weight never touches a bound and still follows the KL.
    def tail(feedback: str, seed: int) -> list[float]:
        gen = torch.Generator().manual_seed(seed)
        w = AdaptiveKLWeight(beta_min=1e-3, beta_max=1e-1, warmup=10, target=1.0, window=10,
                             auto_target=True, feedback=feedback)
        values = []
        for _ in range(300):
            w.update(1e-3 * w.value ** -0.2 * (1 + 0.6 * (2 * torch.rand(1, generator=gen).item() - 1)))
            values.append(w.value)
        return values[50:]

    def on_a_bound(values: list[float]) -> float:
        return sum(v <= 1e-3 * (1 + 1e-9) or v >= 1e-1 * (1 - 1e-9) for v in values) / len(values)

    for seed in range(4):
        assert on_a_bound(tail("proportional", seed)) == 0
        assert max(tail("proportional", seed)) / min(tail("proportional", seed)) > 1.5  # and it moves


def test_a_kl_variant_reads_its_section_only_when_built():
    """Built from its own section (make_kl), a variant holds the values it needs: changing the options it was
    built from afterwards changes nothing at loss time (no run-config namespace is read there)."""
    from types import SimpleNamespace

    from grpo_bench.core.trust_region import KLInputs, make_kl

    g = torch.Generator().manual_seed(0)
    mu = torch.randn(3, 2, 2, 2, 2, generator=g)
    inp = KLInputs(mu=mu, logp=torch.randn(3, generator=g), logp_old=torch.randn(3, generator=g),
                   mu_old=torch.randn(mu.shape, generator=g), mu_ref={"moving": torch.randn(mu.shape, generator=g)},
                   var=torch.rand(3, generator=g) + 0.1)
    opts = SimpleNamespace(beta_pos=1.0, beta_vel=0.1, stepwise_estimator="analytic", stepwise_ref="rollout",
                           anchor_every=5)
    variant = make_kl(opts, kind="dual", params={})
    before = variant(inp)["kl"].clone()
    for held in (opts, variant.cfg, variant.velocity.cfg):  # what it was built from, and the copy it keeps
        held.beta_pos, held.beta_vel, held.stepwise_estimator = 9.0, 9.0, "sample"
    torch.testing.assert_close(variant(inp)["kl"], before)
    assert not hasattr(variant, "options") and variant.beta_pos == 1.0 and variant.velocity.estimator == "analytic"
