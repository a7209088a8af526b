"""The clipped policy loss and group advantages against hand-computed values (docs/design.md §3)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_bench.core.advantages import ADV_NORMS, AdvantageRule, group_advantages, group_std
from grpo_bench.core.loss import clipped_policy_loss
from grpo_bench.errors import UserError


def test_loss_hand_computed():
    # rho = 1.5, 0.5, 1.1, 0.7;  A = 1, 1, -2, -1;  S = 1, 2, 0.5, 1;  eps = 0.2
    # j0: max(-1.5, -1.2) = -1.2 -> -1.2      j1: max(-0.5, -0.8) = -0.5 -> x2 = -1.0
    # j2: max(2.2, 2.2) = 2.2 -> x0.5 = 1.1   j3: max(0.7, 0.8) = 0.8 -> 0.8
    rho = torch.tensor([1.5, 0.5, 1.1, 0.7], dtype=torch.float64)
    logp_old = torch.tensor([-0.3, 0.2, 1.0, -2.0], dtype=torch.float64)
    logp = logp_old + rho.log()
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0], dtype=torch.float64)
    s = torch.tensor([1.0, 2.0, 0.5, 1.0], dtype=torch.float64)
    loss, ratio = clipped_policy_loss(logp, logp_old, adv, s, 0.2)
    torch.testing.assert_close(ratio, rho)
    torch.testing.assert_close(loss, torch.tensor([-1.2, -1.0, 1.1, 0.8], dtype=torch.float64))
    assert loss.mean().item() == pytest.approx(-0.075)


def test_unit_equalizer_gives_plain_ppo_loss():
    g = torch.Generator().manual_seed(0)
    logp, logp_old = torch.randn(64, generator=g), torch.randn(64, generator=g)
    adv = torch.randn(64, generator=g)
    eps = 0.1
    loss, _ = clipped_policy_loss(logp, logp_old, adv, torch.ones(64), eps)
    rho = (logp - logp_old).exp()
    plain = -torch.minimum(adv * rho, adv * rho.clamp(1 - eps, 1 + eps))  # PPO's min form, written independently
    torch.testing.assert_close(loss, plain)
    # and S scales each term linearly
    s = torch.rand(64, generator=g)
    torch.testing.assert_close(clipped_policy_loss(logp, logp_old, adv, s, eps)[0], s * plain)


def test_gradient_is_zero_outside_clip_in_the_improving_direction():
    logp_old = torch.zeros(2)
    logp = torch.log(torch.tensor([1.5, 0.5])).requires_grad_()
    loss, _ = clipped_policy_loss(logp, logp_old, torch.tensor([1.0, -1.0]), torch.ones(2), 0.2)
    loss.sum().backward()
    assert torch.equal(logp.grad, torch.zeros(2))  # both clipped: no further push


def test_advantages_hand_computed():
    r = torch.tensor([1.0, 2.0, 3.0, 6.0, 5.0, 5.0, 5.0, 5.0])
    adv, bad = group_advantages(r, 4, AdvantageRule(adv_clip=5.0))
    mean, std = 3.0, math.sqrt((4 + 1 + 0 + 9) / 4)  # population std
    expect = [(x - mean) / (std + 1e-6) for x in (1, 2, 3, 6)] + [0.0] * 4
    torch.testing.assert_close(adv, torch.tensor(expect))
    assert bad == 0
    assert torch.equal(adv[4:], torch.zeros(4))  # equal rewards: exactly zero
    assert group_std(r, 4) == pytest.approx(std / 2)


def test_equal_rewards_are_exactly_zero_even_with_rounding():
    r = torch.full((6,), 0.1) * 3  # sums with rounding error
    assert torch.equal(group_advantages(r, 3)[0], torch.zeros(6))


def test_advantage_clip():
    r = torch.tensor([0.0] * 99 + [1.0])
    adv, _ = group_advantages(r, 100, AdvantageRule(adv_clip=5.0))
    assert adv.max().item() == 5.0  # unclipped it would be ~9.95
    assert adv[:99].min().item() == pytest.approx(-0.1005, abs=1e-3)


def test_non_finite_reward_is_an_error_unless_zero():
    r = torch.tensor([1.0, float("nan"), 3.0, 4.0])
    with pytest.raises(UserError, match="non-finite"):
        group_advantages(r, 2)
    adv, bad = group_advantages(r, 2, AdvantageRule(on_bad_reward="zero"))
    assert bad == 1
    assert adv[1].item() == 0.0 and adv[0].item() == 0.0  # the group's only finite reward: no signal
    assert adv[2].item() < 0 < adv[3].item()
    assert torch.isfinite(adv).all()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-100, 100, allow_nan=False), min_size=8, max_size=8))
def test_advantages_are_normalised_per_group(values):
    r = torch.tensor(values, dtype=torch.float64)
    adv, _ = group_advantages(r, 4, AdvantageRule(adv_clip=1e9))
    for g, raw in zip(adv.double().reshape(2, 4), r.reshape(2, 4)):
        assert abs(float(g.mean())) < 1e-5
        if float(raw.std(unbiased=False)) > 1e-2:  # above that the +1e-6 is negligible
            assert float(g.std(unbiased=False)) == pytest.approx(1.0, rel=1e-3)
        elif float(raw.max() - raw.min()) == 0:
            assert torch.equal(g, torch.zeros(4, dtype=g.dtype))


def _independent_advantages(rewards, g, norm):
    """Plain-Python reference: per-group mean; std per group (population or n-1) or over the whole batch."""
    import statistics

    groups = [rewards[i:i + g] for i in range(0, len(rewards), g)]
    batch_std = statistics.pstdev(rewards)
    out = []
    for grp in groups:
        mean = sum(grp) / len(grp)
        std = {"group": statistics.pstdev(grp), "group_unbiased": statistics.stdev(grp), "global": batch_std}[norm]
        out += [(r - mean) / (std + 1e-6) for r in grp]
    return out


@pytest.mark.parametrize("norm", ADV_NORMS)
def test_advantage_norms_match_an_independent_computation(norm):
    r = [0.3, 1.2, -0.4, 2.0, 5.0, 5.5, 4.0, 7.5]
    adv, _ = group_advantages(torch.tensor(r), 4, AdvantageRule(adv_clip=1e9, adv_norm=norm))
    torch.testing.assert_close(adv, torch.tensor(_independent_advantages(r, 4, norm)), rtol=1e-5, atol=1e-6)


def test_global_norm_keeps_group_scale_differences():
    """FlowGRPO's global std: a group with twice the spread gets twice the advantages (group std equalises them)."""
    r = torch.tensor([0.0, 1.0, 0.0, 2.0])
    glob, _ = group_advantages(r, 2, AdvantageRule(adv_clip=1e9, adv_norm="global"))
    grp, _ = group_advantages(r, 2, AdvantageRule(adv_clip=1e9, adv_norm="group"))
    assert float(glob[3]) == pytest.approx(2 * float(glob[1]), rel=1e-5)
    assert float(grp[3]) == pytest.approx(float(grp[1]), rel=1e-5)


@pytest.mark.parametrize("bad,match", [
    (dict(adv_norm="batch"), r"advantage rule: unknown adv_norm 'batch'; allowed: global, group, group_unbiased"),
    (dict(adv_norm=None), r"advantage rule: unknown adv_norm None; allowed: global, group, group_unbiased"),
    (dict(on_bad_reward="skip"), r"advantage rule: unknown on_bad_reward 'skip'; allowed: error, zero"),
    (dict(adv_clip=0.0), r"advantage rule: key 'adv_clip' must be a finite number > 0, got 0.0"),
    (dict(adv_clip=float("inf")), r"advantage rule: key 'adv_clip' must be a finite number > 0, got inf"),
])
def test_a_bad_advantage_rule_is_one_line_before_any_reward(bad, match):
    with pytest.raises(UserError, match=match):
        AdvantageRule(**bad)


def test_the_trainer_builds_the_rule_from_the_run_config_and_nothing_else():
    """The collect phase's GroupSpec holds the rule as its own nested section: the run's three keys, checked."""
    from grpo_bench.config.run import RunConfig, section
    from grpo_bench.train.collect import GroupSpec

    spec = section(RunConfig(adv_clip=2.5, adv_norm="global", on_bad_reward="zero", lr=1e-2), GroupSpec)
    assert spec.advantages == AdvantageRule(adv_clip=2.5, on_bad_reward="zero", adv_norm="global")
    with pytest.raises(UserError, match="unknown adv_norm None"):  # an unresolved 'method default' never trains
        section(RunConfig(adv_norm=None), GroupSpec)
