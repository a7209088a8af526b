"""Kernels, log-probs and the equalizer against docs/design.md §2–3."""

import math

import pytest
import torch
from scipy import integrate

from grpo_bench.core.sampling import StepTable, transition
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import KERNELS, LOGPROB_FORMS, ScheduleWarning, equalizer, log_prob, make_kernel
from grpo_bench.report.samplers import analyse_kernel, monte_carlo_variance

SIG = sigmas(10, 3.0)


def _xv(seed=0, shape=(3, 2, 4, 5, 5)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def _step(kernel, x, v, sig, i):
    """(mu, std) of step i for every row of x through the arithmetic training runs: the kernel's
    ``StepTable`` and ``transition`` (core/sampling.py). std: the step's one scalar, 0-dim."""
    mu, std = transition(StepTable.of_kernel(kernel, sig), torch.full((x.shape[0],), i, dtype=torch.long), x, v)
    assert (std == std.flatten()[0]).all()  # one std per step, whatever the row
    return mu, std.flatten()[0]


@pytest.mark.parametrize("name", KERNELS.names())
def test_every_kernel_is_the_euler_step_at_zero_noise(name):
    x, v = _xv()
    k = make_kernel(name, 0.0)
    for i in range(len(SIG) - 1):
        mu, std = _step(k, x, v, SIG, i)
        delta = float(SIG[i] - SIG[i + 1])
        torch.testing.assert_close(mu, x - delta * v, rtol=1e-5, atol=1e-5)
        assert float(std) == 0.0


def test_sage_variance_is_the_integral_of_the_diffusion_coefficient():
    eta = 0.5
    k = make_kernel("sage", eta)
    s = [float(x) for x in SIG]
    for i, var in enumerate(k.variances(SIG)):
        hi = min(s[i], 1 - 3e-3)  # the documented clamp at sigma = 1
        ref, _ = integrate.quad(lambda u: eta**2 * u / (1 - u), s[i + 1], hi)
        # The reference formula integrates the drift term over the unclamped Delta.
        ref += eta**2 * (hi - s[i])
        assert var == pytest.approx(ref, rel=1e-7, abs=1e-12)


def test_flow_injects_at_least_sage_noise_where_neither_clamps():
    flow, sage = make_kernel("flow", 0.7), make_kernel("sage", 0.7)
    for T, shift in ((10, 3.0), (20, 5.0), (50, 1.0)):
        sig = sigmas(T, shift)
        vf, vs = flow.variances(sig), sage.variances(sig)
        # Step 0 starts at sigma = 1 where both kernels clamp differently (flow uses sigma_1,
        # sage 1-3e-3), so the left-point bound s/(1-s) >= the integral holds from step 1 on.
        assert all(f >= s - 1e-15 for f, s in zip(vf[1:], vs[1:]))


def test_cps_last_step_is_deterministic_and_matches_formula():
    a = 0.7
    k = make_kernel("cps", a)
    x, v = _xv(1)
    for i in range(len(SIG) - 1):
        s, sn = float(SIG[i]), float(SIG[i + 1])
        mu, std = _step(k, x, v, SIG, i)
        x0, x1 = x - s * v, x + (1 - s) * v
        ref = (1 - sn) * x0 + sn * math.cos(a * math.pi / 2) * x1
        torch.testing.assert_close(mu, ref, rtol=1e-5, atol=1e-5)
        assert float(std) == pytest.approx(sn * math.sin(a * math.pi / 2), rel=1e-6)
    assert k.variances(SIG)[-1] == 0.0


@pytest.mark.parametrize("name", ["flow", "dance", "sage"])
def test_score_corrected_mean_matches_design_formula(name):
    k = make_kernel(name, 0.6)
    x, v = _xv(2)
    for i in range(len(SIG) - 1):
        s, sn = float(SIG[i]), float(SIG[i + 1])
        mu, std = _step(k, x, v, SIG, i)
        score = -(x + (1 - s) * v) / s
        ref = x - (s - sn) * v + float(std) ** 2 / 2 * score
        torch.testing.assert_close(mu, ref, rtol=1e-5, atol=1e-5)


def test_dance_without_score_term_is_euler_mean():
    k = make_kernel("dance", 0.3, score_term=False)
    x, v = _xv(3)
    mu, std = _step(k, x, v, SIG, 4)
    torch.testing.assert_close(mu, x - float(SIG[4] - SIG[5]) * v)
    assert float(std) ** 2 == pytest.approx(0.09 * float(SIG[4] - SIG[5]), rel=1e-6)


def test_sage_negative_variance_becomes_deterministic_with_a_warning():
    sig = sigmas(100, 5.0)  # the first steps have sigma' > 1 - 3e-3
    k = make_kernel("sage", 0.5)
    with pytest.warns(ScheduleWarning, match="treated as deterministic"):
        var = k.variances(sig)
    assert var[0] == 0.0 and min(var) >= 0 and max(var) > 0
    x, v = _xv(4)
    mu, std = _step(k, x, v, sig, 0)
    assert torch.isfinite(mu).all() and float(std) == 0.0


def test_ode_final_variance_error_shrinks_with_steps():
    errs = [abs(analyse_kernel(make_kernel("ode"), sigmas(T, 3.0), 0.5).var_rel_err[-1]) for T in (10, 40, 160)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.05  # first-order convergence: ~4x smaller per 4x steps
    assert errs[1] / errs[2] == pytest.approx(4, rel=0.2)


@pytest.mark.parametrize(
    "name,level", [("ode", 0.0), ("flow", 0.7), ("dance", 0.3), ("sage", 0.5), ("cps", 0.7)]
)
def test_closed_form_variance_matches_monte_carlo(name, level):
    k = make_kernel(name, level)
    n = 100_000
    closed = analyse_kernel(k, SIG, 0.5).variance
    mc = monte_carlo_variance(k, SIG, 0.5, n=n, seed=7)
    for c, m in zip(closed, mc):
        # sample variance of n Gaussians: std error c*sqrt(2/n); allow 5 sigma
        assert m == pytest.approx(c, abs=5 * c * math.sqrt(2 / n))


def test_gaussian_log_prob_matches_torch_normal():
    x, mu = _xv(5)
    std = torch.tensor(0.37)
    lp = log_prob(x, mu, std)
    ref = torch.distributions.Normal(mu, std).log_prob(x).flatten(1).mean(1)
    torch.testing.assert_close(lp, ref)
    assert lp.shape == (x.shape[0],) and lp.dtype == torch.float32
    assert (log_prob(mu, mu, std) > lp).all()  # largest at x_next = mu


def test_unscaled_log_prob_is_negative_mean_square():
    x, mu = _xv(6)
    torch.testing.assert_close(log_prob(x, mu, torch.tensor(0.5), "unscaled"), -((x - mu) ** 2).flatten(1).mean(1))


@pytest.mark.parametrize("name,level", [("flow", 0.7), ("dance", 0.3), ("sage", 0.5), ("cps", 0.7)])
@pytest.mark.parametrize("steps", [9, 10])
def test_equalizer_balances_n_times_s(name, level, steps):
    sig = sigmas(steps, 3.0)
    k = make_kernel(name, level)
    s = equalizer(k, sig).double()
    rows = k.table(sig)
    stoch = torch.tensor([var > 0 for *_, var in rows])
    n = torch.tensor([abs(b) / math.sqrt(var) if var > 0 else 0.0 for _, b, var in rows], dtype=torch.float64)
    prod = (n * s)[stoch]
    torch.testing.assert_close(prod, torch.full_like(prod, float(prod[0])), rtol=1e-5, atol=0)
    assert (s[~stoch] == 0).all()
    assert float(s[stoch].median()) == pytest.approx(1.0, rel=1e-5) or stoch.sum() % 2 == 0
    assert float(s[stoch].max()) / float(s[stoch].min()) > 1.5  # there was an imbalance to remove
    assert (s[stoch] == 1.0).any()  # the median step keeps weight 1


def test_equalizer_uses_lambda_formula():
    a = 0.7
    k = make_kernel("cps", a)
    s = [float(x) for x in SIG]
    for i, (_, b, _) in enumerate(k.table(SIG)):
        lam = abs(-s[i] * (1 - s[i + 1]) + s[i + 1] * math.cos(a * math.pi / 2) * (1 - s[i]))
        assert abs(b) == pytest.approx(lam)
    k = make_kernel("sage", 0.5)
    for i, (_, b, var) in enumerate(k.table(SIG)):
        assert abs(b) == pytest.approx((s[i] - s[i + 1]) + var * (1 - s[i]) / (2 * s[i]))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: make_kernel("euler", 0.1), "allowed: " + ", ".join(sorted(KERNELS.names()))),
        (lambda: make_kernel("flow", -0.1), ">= 0"),
        (lambda: make_kernel("cps", 1.5), r"\[0, 1\]"),
        (lambda: sigmas(0, 3.0), "steps must be"),
        (
            lambda: log_prob(torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor(1.0), "laplace"),
            "allowed: " + ", ".join(sorted(LOGPROB_FORMS.names())),
        ),
        (lambda: equalizer(make_kernel("sage", 0.5), torch.tensor([1.0, 0.6, 0.7, 0.0])), "strictly decreasing"),
        (lambda: equalizer(make_kernel("sage", 0.5), torch.tensor([0.9, 0.5, 0.0])), "start at 1"),
    ],
)
def test_bad_input_is_a_value_error_naming_allowed_values(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_flow_variance_matches_design_formula():
    a = 0.7
    s = [float(x) for x in SIG]
    for i, var in enumerate(make_kernel("flow", a).variances(SIG)):
        st = s[1] if s[i] == 1.0 else s[i]
        assert var == pytest.approx(a**2 * s[i] / (1 - st) * (s[i] - s[i + 1]), rel=1e-12)


def _measured_grad_norms(kernel, sig, form: str, n: int = 4000) -> torch.Tensor:
    """Per stochastic step, the mean norm of d logp / d v measured by autograd through the kernel's
    training step (its StepTable and ``transition``) and the log-prob form (independent of the equalizer's
    closed-form sensitivity). x and v are drawn in float64; ``transition`` computes in float32, as training does."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i, var in enumerate(kernel.variances(sig)):
        if var <= 0:
            continue
        x = torch.randn(n, 8, generator=g, dtype=torch.float64)
        v = torch.randn(n, 8, generator=g, dtype=torch.float64).requires_grad_(True)
        mu, std = _step(kernel, x, v, sig, i)
        x_next = (mu + std * torch.randn(n, 8, generator=g)).detach()
        log_prob(x_next, mu, std, form).sum().backward()
        out.append(v.grad.norm(dim=1).mean())
    return torch.stack(out).double()


@pytest.mark.parametrize("name,level,form", [("cps", 0.7, "unscaled"), ("sage", 0.5, "gaussian"),
                                             ("flow", 0.7, "gaussian")])
def test_equalizer_following_the_log_prob_form_flattens_measured_gradient_norms(name, level, form):
    sig = sigmas(10, 3.0)
    kernel = make_kernel(name, level)
    norms = _measured_grad_norms(kernel, sig, form)
    weights = equalizer(kernel, sig, form).double()
    weighted = norms * weights[weights > 0]
    spread = lambda t: float(t.max() / t.min())  # noqa: E731
    assert spread(norms) > 1.5  # there was an imbalance
    assert spread(weighted) < 1.05  # and the weights remove it, as measured
    if form == "unscaled":  # the Gaussian proxy lambda/std widens CPS's spread instead (issue 11, item 8)
        assert spread(norms * equalizer(kernel, sig).double()[weights > 0]) > spread(norms)
