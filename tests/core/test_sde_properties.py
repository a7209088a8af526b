"""Property-based checks of the kernels over random schedules and noise levels (hypothesis)."""

import math
import warnings

from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import ScheduleWarning, equalizer, make_kernel
from grpo_bench.report.samplers import analyse_kernel

schedules = st.tuples(st.integers(2, 60), st.floats(0.5, 8.0))
levels = st.floats(0.05, 1.0)


@settings(max_examples=60, deadline=None)
@given(schedules, levels)
def test_variances_are_finite_and_nonnegative(sched, level):
    sig = sigmas(*sched)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScheduleWarning)
        for name in ("flow", "dance", "sage", "cps"):
            var = make_kernel(name, level).variances(sig)
            assert all(math.isfinite(v) and v >= 0 for v in var)


@settings(max_examples=60, deadline=None)
@given(schedules, levels)
def test_left_point_flow_bounds_exact_sage_below_the_clamp(sched, level):
    sig = sigmas(*sched)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScheduleWarning)
        vf = make_kernel("flow", level).variances(sig)
        vs = make_kernel("sage", level).variances(sig)
    for i in range(1, len(vf)):
        assert vf[i] >= vs[i] * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(schedules, levels, st.sampled_from(["flow", "dance", "sage", "cps"]))
def test_equalizer_products_are_constant(sched, level, name):
    sig = sigmas(*sched)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScheduleWarning)
        k = make_kernel(name, level)
        s = equalizer(k, sig).double()
        rows = k.table(sig)
    prods = [abs(b) / math.sqrt(var) * float(s[i]) for i, (_, b, var) in enumerate(rows) if var > 0]
    if prods:
        assert max(prods) - min(prods) <= 1e-4 * max(prods)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), st.floats(0.5, 6.0), st.floats(0.1, 2.0))
def test_closed_form_variance_stays_positive_and_ends_near_data(steps, shift, data_std):
    # With the exact model every kernel's variance stays positive; the ODE's relative error is
    # bounded by the first-order Euler error of a contraction (never worse than -100%).
    r = analyse_kernel(make_kernel("ode"), sigmas(steps, shift), data_std)
    assert all(v > 0 for v in r.variance)
    assert -1 < r.var_rel_err[-1] < 1 + 4 * shift / steps * max(1.0, 1 / data_std**2)
