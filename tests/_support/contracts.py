"""The contract every registered plug-in must honour (as diffusers' scheduler test mixin does).

Plain functions, one per kind, so that test_contracts.py runs them over every registered name and
test_plugin_method.py over a plug-in loaded at test time. Each check compares against an
independent computation (autograd, Monte Carlo, torch.distributions, fixed points), never against
the expression the plug-in itself returns. The tensors go through the arithmetic training runs: a
``StepTable`` of the kernel (or of the method) and ``transition`` (core/sampling.py), the one step
function of rollouts, the loss and evaluation.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from scipy import stats

from grpo_bench.config.run import RunConfig, TrustRegion
from grpo_bench.core.anchors import ANCHOR_POLICIES, make_anchor_policy
from grpo_bench.core.method import METHODS, MethodConfig, RunShape, make_method
from grpo_bench.core.sampling import StepTable, transition
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import KERNELS, LOGPROB_FORMS, ScheduleWarning, equalizer, log_prob, make_kernel
from grpo_bench.core.trust_region import KL_VARIANTS, KLInputs, make_kl
from grpo_bench.errors import UserError
from grpo_bench.report.samplers import analyse_kernel, monte_carlo_variance

SCHEDULES = [(3, 3.0), (10, 1.0), (10, 3.0), (50, 5.0)]


def kernel_under_test(name: str, noise: float = 0.5):
    cls = KERNELS.get(name)
    return make_kernel(name, min(noise, cls.max_noise_level))


def check_kernel(name: str) -> None:
    kernel = kernel_under_test(name)
    g = torch.Generator().manual_seed(0)
    for steps, shift in SCHEDULES:
        sig = sigmas(steps, shift)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScheduleWarning)
            var = kernel.variances(sig)
            rows = kernel.table(sig)
        # variance >= 0 and finite on every step of every schedule; finite coefficients
        assert len(var) == steps and all(math.isfinite(v) and v >= 0 for v in var), (name, steps, shift, var)
        assert all(math.isfinite(a) and math.isfinite(b) for a, b, _ in rows), (name, steps, shift)

        # |d mu / d v| measured by autograd on the kernel's own step equals the lambda the equalizer uses:
        # S_i * lambda_i / std_i is the same constant (the median) at every stochastic step.
        x = torch.randn(2, 3, 2, 4, 4, generator=g)
        lam, std = [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScheduleWarning)
            table = StepTable.of_kernel(kernel, sig)  # what training steps with
        for i in range(steps):
            v = torch.randn(x.shape, generator=g, requires_grad=True)
            mu, s = transition(table, torch.full((2,), i), x, v)
            (grad,) = torch.autograd.grad(mu.sum(), v)
            assert torch.allclose(grad, grad.flatten()[0].expand_as(grad), atol=1e-6)  # mu is linear in v
            lam.append(abs(float(grad.flatten()[0])))
            std.append(float(s.flatten()[0]))
        assert all(abs(s - math.sqrt(v)) <= 1e-6 * (1 + math.sqrt(v)) for s, v in zip(std, var))
        weights = equalizer(kernel, sig).double()
        stochastic = [i for i in range(steps) if std[i] > 0]
        for i in range(steps):
            if i not in stochastic:
                assert float(weights[i]) == 0.0
        if stochastic:
            products = torch.tensor([float(weights[i]) * lam[i] / std[i] for i in stochastic], dtype=torch.float64)
            assert torch.allclose(products, products[0].expand_as(products), rtol=1e-4), (name, products)

    # Gaussian data: the closed-form marginal-variance recursion equals a Monte Carlo run of the kernel.
    # Every x_i is Gaussian, so (n-1) s^2 / Var ~ chi2(n-1): the band holds with probability 1 - 2e-6.
    sig, n = sigmas(10, 3.0), 40_000
    closed = analyse_kernel(kernel, sig, data_std=0.5).variance
    mc = monte_carlo_variance(kernel, sig, data_std=0.5, n=n, seed=1)
    lo, hi = stats.chi2.ppf([1e-6, 1 - 1e-6], n - 1) / (n - 1)
    for c, m in zip(closed, mc):
        assert lo * c - 1e-12 <= m <= hi * c + 1e-12, (name, closed, mc)

    # parameters: the defaults build, an unknown key names the allowed ones
    with pytest.raises(UserError, match=f"kernel {name!r} has no parameter kernel.no_such_key; allowed"):
        make_kernel(name, 0.0, params={"no_such_key": 1})
    with pytest.raises(UserError, match=">= 0"):
        make_kernel(name, -0.1)


def check_method(name: str) -> None:
    cls = METHODS.get(name)
    assert cls.__doc__ and isinstance(cls.defaults, MethodConfig)
    method = make_method(name)
    assert method.kernel.name == method.config.kernel
    assert method.config.logprob in LOGPROB_FORMS and method.config.kl in KL_VARIANTS
    for steps, shift in SCHEDULES:
        sig = sigmas(steps, shift)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScheduleWarning)
            sde, eligible = method.sde_steps(sig), method.eligible_steps(sig)
            var = method.kernel.variances(sig)
        assert eligible.dtype == torch.bool and eligible.shape == (steps,)
        if method.needs_logprob:  # a likelihood-free family trains on re-noised samples, not on transitions
            assert not (eligible & ~sde).any(), "a trained step must be sampled with the kernel"
            assert all(var[i] > 0 for i in eligible.nonzero().flatten().tolist()), "a trained step must be stochastic"
        if not eligible.any():
            continue
        try:  # a method may refuse a schedule (one line, before any work); then it is not run on it
            method.check_run(sig, RunShape(updates=100, group_size=4, shared_noise=method.config.shared_noise))
        except UserError:
            continue
        for u in (0, 1, 7, 60):  # a window schedule: this update's steps are static SDE steps, reproducibly
            active = method.update_steps(sig, u, torch.Generator().manual_seed(u))
            if active is None:
                continue
            assert torch.equal(active, method.update_steps(sig, u, torch.Generator().manual_seed(u)))
            assert active.dtype == torch.bool and active.shape == (steps,) and not (active & ~sde).any()
            if (active & eligible).any():
                picked = method.train_steps(sig, 5, torch.Generator().manual_seed(3), active=active)
                assert (active & eligible)[picked].all()
        picked = method.train_steps(sig, 5, torch.Generator().manual_seed(3))
        again = method.train_steps(sig, 5, torch.Generator().manual_seed(3))
        assert picked.shape[0] == 5 and picked.dtype == torch.long and torch.equal(picked, again)
        assert eligible[picked].all() and (picked[:, 1:] > picked[:, :-1]).all()
    sig = sigmas(10, 3.0)
    assert method.eligible_steps(sig).any(), f"{name} trains no step of the default schedule"
    assert set(method.describe()) == {"kernel", "steps", "loss", "source"} and method.describe()["source"]
    if not method.needs_logprob:
        return
    # a transition's log-prob is finite float32 per sample, whatever the input dtype (the training path)
    x, v = torch.randn(4, 3, 2, 4, 4).bfloat16(), torch.randn(4, 3, 2, 4, 4).bfloat16()
    i = int(method.eligible_steps(sig).nonzero()[0])
    mu, std = transition(StepTable.build(method, sig), torch.full((4,), i), x, v)
    lp = log_prob(mu + std * torch.randn(mu.shape), mu, std, method.config.logprob)
    assert lp.shape == (4,) and lp.dtype == torch.float32 and torch.isfinite(lp).all()


def _kl_inputs(anchors, seed: int, b: int = 4, same: bool = False) -> KLInputs:
    g = torch.Generator().manual_seed(seed)
    shape = (b, 3, 2, 4, 4)
    mu = torch.randn(shape, generator=g, requires_grad=True)
    logp = torch.randn(b, generator=g)
    other = (lambda: mu.detach().clone()) if same else (lambda: torch.randn(shape, generator=g))
    return KLInputs(mu=mu, logp=logp, logp_old=logp.clone() if same else torch.randn(b, generator=g),
                    mu_old=other(), mu_ref={a: other() for a in anchors}, var=torch.rand(b, generator=g) + 0.05,
                    delta=torch.rand(b, generator=g) * 0.2 + 0.01)  # the loss gives every estimator its step's Delta


def check_kl_variant(name: str) -> None:
    cls = KL_VARIANTS.get(name)
    assert cls.__doc__
    for anchor, policy in cls.anchors.items():
        assert policy in ANCHOR_POLICIES, f"KL variant {name!r}: anchor {anchor!r} names unknown policy {policy!r}"
    for estimator in ("sample", "analytic"):
        variant = make_kl(RunConfig(kl=name, stepwise_estimator=estimator))
        # zero when the policy equals every anchor and the rollout policy
        out = variant(_kl_inputs(cls.anchors, 0, same=True))
        assert out["kl"].shape == (4,) and torch.allclose(out["kl"], torch.zeros(4), atol=1e-7), (name, out["kl"])
        # finite, with a finite gradient to the policy mean
        inp = _kl_inputs(cls.anchors, 1)
        kl = variant(inp)["kl"]
        assert kl.shape == (4,) and torch.isfinite(kl).all()
        if kl.requires_grad:
            (grad,) = torch.autograd.grad(kl.sum(), inp.mu)
            assert torch.isfinite(grad).all()
        if estimator == "analytic":  # analytic estimators are KL divergences: never negative
            assert (kl >= 0).all(), (name, kl)


def check_anchor_policy(name: str) -> None:
    cls = ANCHOR_POLICIES.get(name)
    assert cls.__doc__
    policy = make_anchor_policy(name, TrustRegion(anchor_every=2))
    g = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g)}
    frozen = {k: v.clone() for k, v in params.items()}
    # a snapshot equal to the policy stays equal (a fixed point), whatever the step
    snap = {k: v.clone() for k, v in params.items()}
    for step in range(1, 5):
        policy.update(snap, params, step)
        assert all(torch.equal(snap[k], params[k]) for k in params)
    # from another snapshot: every update stays between the old anchor and the policy, element-wise,
    # leaves the policy alone, and a step reported as no change changes nothing
    snap = {k: torch.randn(v.shape, generator=g) for k, v in params.items()}
    for step in range(1, 7):
        before = {k: v.clone() for k, v in snap.items()}
        changed = policy.update(snap, params, step)
        assert isinstance(changed, bool)
        for k in params:
            lo, hi = torch.minimum(before[k], params[k]), torch.maximum(before[k], params[k])
            assert ((snap[k] >= lo - 1e-6) & (snap[k] <= hi + 1e-6)).all()
            assert torch.equal(params[k], frozen[k])
            if not changed:
                assert torch.equal(snap[k], before[k])
