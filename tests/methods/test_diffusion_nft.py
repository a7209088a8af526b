"""DiffusionNFT as its authors run it: every shipped number against NVlabs/DiffusionNFT (commit 24af555; the
README runs ``scripts/train_nft_sd3.py --config config/nft.py:sd3_geneval``), quoted file:line in each docstring
(``T.py`` = scripts/train_nft_sd3.py), and the behaviour the code has: rollouts from the old policy, the old policy
updated once per update, a velocity KL to pi_0 in the loss, int(0.99 T) trained times per sample."""

from __future__ import annotations

import pytest
import torch
from tiny_world import TinyModel, TinyReward

from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.core import schedule
from grpo_bench.core.anchors import ANCHOR_POLICIES
from grpo_bench.core.loss import LossContext, step_terms
from grpo_bench.core.method import make_method
from grpo_bench.core.rollout import Rollout, StepTable, generator
from grpo_bench.core.sampling import GUIDANCE_FORMULAS
from grpo_bench.core.trust_region import make_kl
from grpo_bench.train.collect import collect
from grpo_bench.train.trainer import Trainer

OLD, REF = "nft_old", "nft_ref"


def _return_decay(step: int, decay_type: int) -> float:
    """T.py:169-189 ``return_decay`` (flat, uprate, uphold per decay_type), transcribed."""
    flat, uprate, uphold = {0: (0, 0.0, 0.0), 1: (0, 0.001, 0.5), 2: (75, 0.0075, 0.999)}[decay_type]
    return 0.0 if step < flat else min((step - flat) * uprate, uphold)


# --- the official defaults, one test each -------------------------------------------------------------------
def test_beta_is_config_beta():
    """config/nft.py:61 ``config.beta = 1.0`` (sd3_geneval keeps it; sd3_multi_reward sets 0.1, nft.py:137)."""
    assert make_method("diffusion_nft").params.beta == 1.0


def test_adv_clip_max_is_the_base_config():
    """config/base.py:84 ``train.adv_clip_max = 5`` (nft.py never overrides it)."""
    assert make_method("diffusion_nft").params.adv_clip_max == 5.0


def test_kl_weight_is_train_beta():
    """config/nft.py:24 ``config.train.beta = 0.0001`` (base.py:89 the same), used at T.py:970 ``loss +=
    config.train.beta * torch.mean(kl_div_loss)``."""
    assert make_method("diffusion_nft").params.kl_beta == 1e-4


def test_old_policy_schedule_is_decay_type_1():
    """config/nft.py:60 ``config.decay_type = 1`` (sd3_geneval and sd3_multi_reward keep it; only sd3_ocr sets 2,
    nft.py:78); T.py:174-177: flat 0, uprate 0.001, uphold 0.5."""
    policy = ANCHOR_POLICIES.get("nft_ema")
    one = policy(None, **make_method("diffusion_nft").anchor_params())
    two = policy(None, flat=75, uprate=0.0075, uphold=0.999)
    for step in (0, 1, 10, 74, 75, 76, 175, 499, 500, 501, 5000):
        assert one.decay(step) == pytest.approx(_return_decay(step, 1))
        assert two.decay(step) == pytest.approx(_return_decay(step, 2))


def test_advantages_use_the_global_std():
    """config/base.py:57 ``sample.global_std = True`` (nft.py never overrides it), read by T.py:508
    ``PerPromptStatTracker(config.sample.global_std)``: flow_grpo/stat_tracking.py:26-31, per-prompt mean over
    ``np.std(rewards) + 1e-4`` of the whole batch (this project's ``global``, eps 1e-6)."""
    assert make_method("diffusion_nft").config.adv_norm == "global"


def test_revision_moves_the_ids_of_the_corrected_recipe():
    """Its runs compute something else than release 0.4's reading, so its cells must not be taken for those."""
    from grpo_bench.config.identity import cell_id

    cfg = resolve(RunConfig(method="diffusion_nft"))
    assert cfg.method_revision == 1
    assert cell_id(cfg) != cell_id({**cfg.to_dict(), "method_revision": 0})


def test_trained_times_are_int_of_steps_times_timestep_fraction():
    """T.py:569 ``num_train_timesteps = int(config.sample.num_steps * config.train.timestep_fraction)`` with
    base.py:87 ``timestep_fraction = 0.99`` and nft.py:20 ``num_steps = 10``: 9 of the 10 times (24 of 25 at
    sd3_multi_reward's nft.py:136 ``num_steps = 25``); the project's round() would give all 10."""
    m = make_method("diffusion_nft")
    assert m.config.train_fraction == 0.99
    for steps, k in ((10, 9), (25, 24), (4, 3), (1, 1)):
        got = m.train_steps(schedule.sigmas(steps, 3.0), 5, torch.Generator().manual_seed(0))
        assert got.shape == (5, k)
        assert all(len(set(row)) == k for row in got.tolist())  # distinct times per sample


def test_trained_times_are_a_fresh_random_subset_per_sample():
    """T.py:810-816: a ``torch.randperm(num_timesteps)`` per sample, the first num_train_timesteps trained
    (T.py:854-864): every time is left out equally often, and samples differ."""
    m, sig = make_method("diffusion_nft"), schedule.sigmas(10, 3.0)
    got = m.train_steps(sig, 4000, torch.Generator().manual_seed(1))
    left_out = torch.ones(4000, 10, dtype=torch.bool).scatter_(1, got, False).float().mean(0)  # [10]
    assert torch.allclose(left_out, torch.full((10,), 0.1), atol=0.02)
    assert len({tuple(r) for r in got[:50].tolist()}) > 5


def test_sampler_is_deterministic_and_the_loss_reads_the_schedule_times():
    """config/nft.py:65-66 ``sample.deterministic = True``, ``sample.solver = "dpm2"``; T.py:864 ``t =
    timesteps / 1000`` with the scheduler's times (T.py:662): t = sigma_i for i = 0..T-1. The dpm2 multistep step
    needs the previous x0 prediction, not expressible as x' = a x + b v: the Euler ODE here, and said so."""
    m = make_method("diffusion_nft")
    table = StepTable.build(m, schedule.sigmas(10, 3.0))
    assert m.config.kernel == "ode" and not bool(table.sde.any()) and float(table.std.abs().max()) == 0
    assert m.eligible_steps(schedule.sigmas(10, 3.0)).all()
    assert "dpm2" in m.source and "Euler" in m.source


# --- the loss, with its KL term --------------------------------------------------------------------------
def _loss_case(kl_beta: float, guidance: float = 1.0, formula: str = "cfg"):
    m = make_method("diffusion_nft", params={"method.beta": 0.1, "method.kl_beta": kl_beta})
    model, old, ref = TinyModel(seed=0), TinyModel(seed=1), TinyModel(seed=2)
    sig = schedule.sigmas(4, 3.0)
    b, shape = 4, model.latent_shape
    g = torch.Generator().manual_seed(0)
    prompts = ["a red circle moving left"] * b
    final, noise = torch.randn(b, *shape, generator=g), torch.randn(b, 4, *shape, generator=g)
    ro = Rollout(prompts=prompts, cond=model.encode_prompts(prompts), stored=torch.arange(4),
                 slot=torch.arange(4), x=torch.zeros(b, 4, *shape), x_next=torch.zeros(b, 4, *shape),
                 logp_old=torch.zeros(b, 4), mu_old=torch.zeros(b, 4, *shape), mu_ref={}, videos=final,
                 final=final, noise=noise)
    ctx = LossContext(model, StepTable.build(m, sig), torch.ones(4), make_kl(RunConfig(kl="none")), 1e-4,
                      "gaussian", guidance, live_anchors={OLD: old.velocity, REF: ref.velocity}, family="nft",
                      method_params=m.params, method_anchors=(OLD, REF), guidance_formula=formula)
    adv = torch.tensor([7.0, 1.0, -2.0, 0.0])
    steps = torch.tensor([0, 1, 2, 3])
    got = step_terms(ctx, ro, adv, torch.arange(b), steps)
    t = sig[:4].float().view(-1, 1, 1, 1, 1)
    x0, eps = final, noise[torch.arange(b), steps]
    xt = (1 - t) * x0 + t * eps
    cond, null = model.encode_prompts(prompts), model.null_cond(b)

    def guided(net):  # each half its own call, combined by the run's formula (the rollout's guidance)
        v_cond = net.velocity(xt, sig[:4].float(), cond)
        if guidance == 1.0:
            return v_cond
        return GUIDANCE_FORMULAS.get(formula)(net.velocity(xt, sig[:4].float(), null), v_cond, guidance)

    forward = guided(model)
    with torch.no_grad():
        prior, reference = guided(old), guided(ref)
    return model, got, adv, t, x0, xt, forward, prior, reference


def test_loss_is_the_official_expression_with_its_kl_term():
    """T.py:870 ``xt = (1 - t) * x0 + t * noise``; T.py:928-929 ``r = clamp((adv_clip / adv_clip_max) / 2 + 0.5,
    0, 1)``; T.py:934-937 ``positive = beta * forward + (1 - beta) * old``, ``negative = (1 + beta) * old - beta *
    forward``; T.py:940-957 the x0 errors over ``weight_factor = abs(x0_pred - x0).mean().clip(min=1e-5)`` (no
    grad); T.py:959-960 ``(r * positive_loss / beta + (1 - r) * negative_loss / beta) * adv_clip_max``; T.py:966-970
    ``kl_div_loss = ((forward - ref_forward) ** 2).mean(dims)``, ``loss += config.train.beta * mean(kl_div_loss)``."""
    kl_beta, beta, clip = 0.3, 0.1, 5.0  # a visible KL weight: the term must enter at exactly this scale
    model, got, adv, t, x0, xt, forward, prior, reference = _loss_case(kl_beta)
    r = ((adv.clamp(-clip, clip) / clip) / 2 + 0.5).clamp(0, 1)

    def weighted(pred):
        x0p = xt - t * pred
        w = (x0p.double() - x0.double()).abs().mean(dim=(1, 2, 3, 4), keepdim=True).clip(min=1e-5)
        return ((x0p - x0) ** 2 / w.detach()).mean(dim=(1, 2, 3, 4))

    pos, neg = weighted(beta * forward + (1 - beta) * prior), weighted((1 + beta) * prior - beta * forward)
    kl_div = ((forward - reference) ** 2).mean(dim=(1, 2, 3, 4))
    expected = (r * pos / beta + (1 - r) * neg / beta) * clip + kl_beta * kl_div
    torch.testing.assert_close(got.policy, expected.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.kl["nft_kl_div"], kl_div.detach().float(), rtol=1e-5, atol=1e-7)
    assert float(got.kl["nft_kl_div"].min()) > 0 and torch.equal(got.kl["kl"], torch.zeros(4))
    assert torch.equal(got.ratio, torch.ones(4)) and got.forward_rows == 3 * 4  # policy, old and reference
    (grad,) = torch.autograd.grad(got.policy.sum(), next(model.net.parameters()))
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_kl_beta_zero_drops_the_term_and_its_anchor():
    """``method.kl_beta=0`` is the loss without T.py:970's term: no reference anchor, two forwards."""
    m = make_method("diffusion_nft", params={"method.kl_beta": 0.0})
    assert m.anchor_policies() == {OLD: "nft_ema"}
    assert make_method("diffusion_nft").anchor_policies() == {OLD: "nft_ema", REF: "nft_reference"}
    *_, got, adv, t, x0, xt, forward, prior, reference = _loss_case(0.0)
    assert got.forward_rows == 2 * 4 and torch.equal(got.kl["nft_kl_div"], torch.zeros(4))


def test_under_guidance_the_three_forwards_combine_alike():
    """T.py:873-905: the old, trained and reference forwards are one call each on the same inputs; under guidance
    here each is the rollout's guided velocity, the reference's combined by the run's formula like the others (it
    was once combined by plain CFG whatever the run's ``guidance_formula``)."""
    *_, got, adv, t, x0, xt, forward, prior, reference = _loss_case(0.3, guidance=2.0, formula="norm_rescaled")
    kl_div = ((forward - reference) ** 2).mean(dim=(1, 2, 3, 4))
    torch.testing.assert_close(got.kl["nft_kl_div"], kl_div.detach().float(), rtol=1e-5, atol=1e-7)
    assert got.forward_rows == 3 * 2 * 4  # three guided calls of doubled batches


# --- behaviour: the old policy samples, and follows once per update ----------------------------------------
def _trainer(tmp_path, **kw) -> Trainer:
    cfg = RunConfig(method="diffusion_nft", steps=4, prompts_per_update=2, group_size=2, updates=2, eval_every=10,
                    minibatches=2, eval_samples=1, diag_every=0, checkpoint_every=10, device="cpu", lr=1e-2,
                    save_videos=False, threads=1, **kw)
    return Trainer(resolve(cfg), tmp_path / "run", model=TinyModel(seed=0), reward=TinyReward())


def test_rollouts_are_sampled_by_the_old_policy(tmp_path):
    """T.py:640-659: ``set_adapter("old")`` before ``pipeline_with_logprob``, ``set_adapter("default")`` after:
    the old policy samples. With an old policy different from the trained one, the rollout's first step is the
    old policy's Euler step x1 = x0 - Delta_0 v_old(x0), not the trained policy's."""
    tr = _trainer(tmp_path)
    snap = tr.anchors.snapshots[OLD]
    g = torch.Generator().manual_seed(3)
    for n in snap:
        snap[n].add_(0.3 * torch.randn(snap[n].shape, generator=g))  # an old policy far from the policy
    batch = collect(tr.policy, tr.reward, tr.method, tr.train_prompts, tr.cfg.seed, 0, tr.groups, tr.shard)
    ro = batch.rollout
    x0, sig = ro.x[:, 0], tr.table.sigma[0].expand(len(ro.prompts))
    with torch.no_grad():
        v_old = tr.anchors.velocity(OLD)(x0, sig, ro.cond)
        v_now = tr.model.velocity(x0, sig, ro.cond)
    delta = float(tr.sigmas[0] - tr.sigmas[1])
    torch.testing.assert_close(ro.x_next[:, 0], x0 - delta * v_old, rtol=1e-5, atol=1e-5)
    assert float((ro.x_next[:, 0] - (x0 - delta * v_now)).abs().max()) > 1e-2


def test_old_policy_follows_once_per_update_with_return_decay(tmp_path):
    """T.py:1034-1039: after an epoch's optimizer steps, once, ``tgt = tgt * decay + src * (1 - decay)`` with
    ``decay = return_decay(global_step, decay_type)``, global_step the optimizer steps so far (T.py:1021); the old
    policy starts as the policy (T.py:576-579). Two optimizer steps in update 0: old = d(2) old_0 + (1 - d(2))
    policy, d(2) = 0.002; within the update it does not move (the per-step follower it was failed this)."""
    tr = _trainer(tmp_path)
    start = {n: t.clone() for n, t in tr.anchors.snapshots[OLD].items()}
    assert all(torch.equal(start[n], p.detach()) for n, p in tr.module.named_parameters())
    policy = ANCHOR_POLICIES.get("nft_ema")(None, **tr.method.anchor_params())
    seen = []
    real = tr.anchors.after_optimizer_step

    def watch(steps):  # the old policy as each optimizer step leaves it
        changed = real(steps)
        seen.append(all(torch.equal(start[n], t) for n, t in tr.anchors.snapshots[OLD].items()))
        return changed

    tr.anchors.after_optimizer_step = watch
    line = tr.update(0)
    assert line["optimizer_steps"] == 2 and seen == [True, True] and line["anchor_copies"] == 1
    d = policy.decay(2)
    assert d == pytest.approx(_return_decay(2, 1)) == pytest.approx(0.002)
    moved = 0.0
    for n, p in tr.module.named_parameters():
        torch.testing.assert_close(tr.anchors.snapshots[OLD][n], d * start[n] + (1 - d) * p.detach())
        moved = max(moved, float((p.detach() - start[n]).abs().max()))
    assert moved > 1e-4  # the policy moved, so the check above could fail


def test_the_reference_anchor_stays_the_initial_policy(tmp_path):
    """T.py:894-905: the reference is the model with its LoRA adapters disabled, pi_0, for the whole run."""
    tr = _trainer(tmp_path)
    start = {n: t.clone() for n, t in tr.anchors.snapshots[REF].items()}
    tr.update(0)
    tr.update(1)
    assert all(torch.equal(start[n], t) for n, t in tr.anchors.snapshots[REF].items())
    assert any(not torch.equal(start[n], p.detach()) for n, p in tr.module.named_parameters())


def test_a_run_logs_its_kl_and_counts_the_three_forwards(tmp_path):
    """Every trained (sample, time) pair costs a policy forward with grad, the old policy's and the reference's
    (T.py:873-905); the logged ``nft_kl_div`` is the official ``kl_div`` (T.py:973): positive once the first
    optimizer step has moved the policy off pi_0; the run's own trust region stays none."""
    tr = _trainer(tmp_path, max_train_steps=None)
    line = tr.update(0)
    totals = tr.state.compute.totals()
    pairs = 2 * 2 * 3  # P * G rows, int(0.99 * 4) = 3 times each
    assert totals["compute_train_forward"] == pairs and totals["compute_reference"] == 2 * pairs
    assert totals["compute_rollout"] == 2 * 2 * 4
    assert line["nft_kl_div"] > 0 and line["kl"] == 0


def test_rollout_anchor_must_be_one_of_the_methods_anchors():
    """A method naming a rollout anchor it does not declare is refused when it is built (one line)."""
    from grpo_bench.core.method import METHODS, Method, MethodConfig
    from grpo_bench.errors import UserError

    @METHODS.register("samples_from_nothing")
    class SamplesFromNothing(Method):
        """Declares a rollout anchor without anchors."""

        rollout_anchor = "missing"
        defaults = MethodConfig(kernel="flow", noise_level=0.7)

    try:
        with pytest.raises(UserError, match=r"rollout_anchor 'missing' is not one of its anchors; allowed: none"):
            make_method("samples_from_nothing")
    finally:
        METHODS.unregister("samples_from_nothing")


def test_trained_count_default_keeps_round():
    """Other methods keep round(train_fraction * n): DanceGRPO's 60% of 8 eligible steps is 5 (4.8; rounded down,
    4), of 3 is 2 (1.8), of 9 is 5 (5.4)."""
    m = make_method("dance_grpo")
    assert (m.trained_count(8), m.trained_count(3), m.trained_count(9)) == (5, 2, 5)
    assert m.train_steps(schedule.sigmas(9, 3.0), 2, generator(0, "steps", 0)).shape == (2, 5)


def test_methods_listing_shows_each_methods_own_count():
    """``grpo-bench methods`` shows the count the run trains (trained_count), not the share alone: 9 of DiffusionNFT's
    10 times (int(0.99 * 10), T.py:569), 5 of DanceGRPO's 9 steps (round(0.6 * 9))."""
    from grpo_bench.report.methods_table import _trained

    assert _trained(make_method("diffusion_nft")) == "random 9 (99%) of 0..9"
    assert _trained(make_method("dance_grpo")) == "random 5 (60%) of 0..8"
    assert _trained(make_method("flow_grpo")) == "0..8"
