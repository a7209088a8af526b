"""Batched group rollouts: shapes, one call per step, CFG as one doubled batch, shared noise, rho == 1."""

from __future__ import annotations

import pytest
import torch
from tiny_world import TinyModel

from grpo_bench.config.run import RunConfig
from grpo_bench.core import schedule
from grpo_bench.core.anchors import Anchors
from grpo_bench.core.loss import LossContext, step_terms
from grpo_bench.core.method import METHODS, make_method
from grpo_bench.core.rollout import StepTable, generator, initial_noise, rollout
from grpo_bench.core.sampling import sample
from grpo_bench.core.sde import log_prob, make_kernel
from grpo_bench.core.trust_region import make_kl

PROMPTS = ["a red circle moving left", "a blue square moving up"]


class Counting(TinyModel):
    """Records the batch size of every velocity call."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.calls: list[int] = []

    def velocity(self, x, sigma, cond):
        self.calls.append(x.shape[0])
        return super().velocity(x, sigma, cond)


def _setup(method_name: str, steps: int = 5, G: int = 3, guidance: float = 1.0, model=None, anchors=()):
    model = model or TinyModel(seed=0)
    method = make_method(method_name)
    sig = schedule.sigmas(steps, 3.0)
    table = StepTable.build(method, sig)
    stored = method.eligible_steps(sig).nonzero().flatten()
    x0 = initial_noise(model.latent_shape, len(PROMPTS), G, method.config.shared_noise, generator(0, "noise", 0))
    anc = Anchors(anchors, model, model.net)
    ro = rollout(model, table, [p for p in PROMPTS for _ in range(G)], x0, guidance=guidance, stored=stored,
                 logprob=method.config.logprob, sde_gen=generator(0, "sde", 0),
                 anchors={a: anc.velocity(a) for a in anc.names})
    return model, method, sig, table, stored, ro


def test_shapes_and_stored_transitions():
    model, method, sig, table, stored, ro = _setup("sage_grpo", anchors=("moving",))
    B, S = 6, stored.numel()
    assert S == 5  # sage trains every stochastic step
    assert ro.x.shape == ro.x_next.shape == ro.mu_old.shape == (B, S, 3, 8, 16, 16)
    assert ro.logp_old.shape == (B, S) and ro.videos.shape == (B, 3, 8, 16, 16)
    assert ro.prompts == [PROMPTS[0]] * 3 + [PROMPTS[1]] * 3  # group-major
    assert not ro.x.requires_grad and not ro.logp_old.requires_grad
    # trajectories chain: x_{i+1} of step i is x_i of step i+1
    assert torch.equal(ro.x_next[:, :-1], ro.x[:, 1:])
    # stored log-probs are the Gaussian log density of the stored transition
    std = table.std[stored]
    for s in range(S):
        expect = log_prob(ro.x_next[:, s], ro.mu_old[:, s], std[s], "gaussian")
        torch.testing.assert_close(ro.logp_old[:, s], expect)
    # the anchor equals the policy before any update: mu_ref == mu_old exactly
    assert torch.equal(ro.mu_ref["moving"], ro.mu_old)


def test_one_batched_call_per_step_and_cfg_doubles_the_batch():
    model = Counting()
    _setup("flow_grpo", steps=4, G=2, model=model)
    assert model.calls == [4] * 4
    model.calls.clear()
    _, _, _, _, stored, _ = _setup("flow_grpo", steps=4, G=2, guidance=3.0, model=model, anchors=("initial",))
    # one doubled call per step for the policy, then one doubled call for the anchor on every
    # (row, stored step) pair (without train_steps every row trains every stored step)
    assert model.calls == [8, 8, 8, 8, 2 * 4 * stored.numel()]


def test_cfg_combines_conditional_and_unconditional():
    model = TinyModel(seed=0)
    x, sigma = torch.randn(2, 3, 8, 16, 16), torch.tensor([0.5, 0.5])
    cond, null = model.encode_prompts(PROMPTS), model.null_cond(2)
    from grpo_bench.core.rollout import guided_velocity

    with torch.no_grad():
        v = guided_velocity(model.velocity, x, sigma, cond, null, 2.5)
        vc, vu = model.velocity(x, sigma, cond), model.velocity(x, sigma, null)
    torch.testing.assert_close(v, vu + 2.5 * (vc - vu))


def test_shared_noise_within_a_group_and_fair_noise_across_methods():
    shape = (3, 8, 16, 16)
    shared = initial_noise(shape, 2, 4, True, generator(7, "noise", 3))
    indep = initial_noise(shape, 2, 4, False, generator(7, "noise", 3))
    assert torch.equal(shared[0], shared[3]) and not torch.equal(shared[0], shared[4])
    assert not torch.equal(indep[0], indep[1])
    assert torch.equal(indep[0], shared[0]) and torch.equal(indep[4], shared[4])  # the same stream
    assert torch.equal(indep, initial_noise(shape, 2, 4, False, generator(7, "noise", 3)))
    assert not torch.equal(indep, initial_noise(shape, 2, 4, False, generator(8, "noise", 3)))


def test_window_samples_ode_outside():
    method = make_method("flow_grpo", window=[1, 2])
    sig = schedule.sigmas(6, 3.0)
    table = StepTable.build(method, sig)
    assert table.sde.tolist() == [False, True, True, False, False, False]
    assert (table.std[~table.sde] == 0).all() and (table.std[table.sde] > 0).all()
    assert torch.equal(method.eligible_steps(sig).nonzero().flatten(), torch.tensor([1, 2]))


@pytest.mark.parametrize("name", sorted(n for n in METHODS.names() if make_method(n).needs_logprob))
def test_rho_is_exactly_one_on_first_inner_update(name):
    """Every ratio objective (clipped, normalised, masked) gives rho = 1 exactly on a rollout's first step."""
    model, method, sig, table, stored, ro = _setup(name, anchors=("moving",))
    B = ro.x.shape[0]
    ctx = LossContext(model, table, torch.ones(5), make_kl(RunConfig(kl="dual")), method.config.clip_range,
                      method.config.logprob, 1.0, objective=method.objective, method_params=method.params)
    steps = method.train_steps(sig, B, generator(0, "steps", 0))  # Long[B, K]; per-sample for dance_grpo
    adv = torch.randn(B)
    rows = torch.arange(B)
    for k in range(steps.shape[1]):
        t = step_terms(ctx, ro, adv, rows, steps[:, k])
        assert torch.equal(t.ratio, torch.ones(B)), (name, k, (t.ratio - 1).abs().max())
        assert torch.equal(t.kl["kl_moving"], torch.zeros(B))
        assert torch.equal(t.kl["kl_stepwise"], torch.zeros(B))


def test_rho_is_one_with_guidance_too():
    model, method, sig, table, stored, ro = _setup("sage_grpo", guidance=2.0)
    ctx = LossContext(model, table, torch.ones(5), make_kl(RunConfig(kl="none")), 1e-4, "gaussian", 2.0)
    t = step_terms(ctx, ro, torch.zeros(6), torch.arange(6), torch.full((6,), 2))
    assert torch.equal(t.ratio, torch.ones(6))


def test_ode_sample_is_deterministic_euler():
    model = TinyModel(seed=0)
    sig = schedule.sigmas(3, 2.0)
    x0 = torch.randn(2, *model.latent_shape, generator=torch.Generator().manual_seed(0))
    out = sample(model, PROMPTS, x0, sig, make_kernel("ode"), chunk=1, decode=True)
    x = x0.clone()
    with torch.no_grad():
        for i in range(3):
            x = x - float(sig[i] - sig[i + 1]) * model.velocity(
                x, sig[i].float().expand(2), model.encode_prompts(PROMPTS)
            )
    torch.testing.assert_close(out, x.clamp(-1, 1), rtol=1e-5, atol=1e-5)


def test_anchor_forward_only_on_rows_that_train_the_step():
    model = Counting()
    method = make_method("dance_grpo")  # random steps per sample
    sig = schedule.sigmas(5, 3.0)
    table = StepTable.build(method, sig)
    stored = method.eligible_steps(sig).nonzero().flatten()
    B = 6
    steps = method.train_steps(sig, B, torch.Generator().manual_seed(1))  # Long[B, K]
    anc = Anchors(("initial",), model, model.net)
    x0 = initial_noise(model.latent_shape, 2, 3, True, generator(0, "noise", 0))
    ro = rollout(
        model,
        table,
        [p for p in PROMPTS for _ in range(3)],
        x0,
        guidance=1.0,
        stored=stored,
        logprob="gaussian",
        sde_gen=generator(0, "sde", 0),
        anchors={"initial": anc.velocity("initial")},
        train_steps=steps,
    )
    trains = torch.zeros(B, 5, dtype=torch.bool).scatter_(1, steps, True)  # [B, T]
    trains[:, ro.slot < 0] = False
    # the policy on all rows at every step, then the anchor once, on exactly the (row, step) pairs that train
    assert model.calls == [B] * 5 + [int(trains.sum())]
    for s, i in enumerate(stored.tolist()):
        for j in range(B):
            ref = ro.mu_ref["initial"][j, s]
            if trains[j, i]:
                assert torch.equal(ref, ro.mu_old[j, s])  # anchor == policy before any update
            else:
                assert ref.isnan().all()
