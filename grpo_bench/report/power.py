"""How much a table can tell: seed-clustered intervals, Holm marks, power and sequential looks.

A comparison in grpo-bench is paired by seed: for one seed, two rows share prompts, initial noise
and compute, so the unit of replication is the seed, not the video. Videos of one seed are
correlated (same policy), hence every interval here resamples or averages *clusters* (seeds,
or raters and prompts in a human study), never single videos; the clustered bootstrap itself is
``grpo_bench.report.stats.cluster_bootstrap``.

    holm                Holm-Bonferroni adjusted p-values for a family of comparisons
    t_power / mde       power of the paired t-test; minimum detectable effect at n seeds
    seeds_needed        the smallest n with the stated power for a stated effect
    equivalent          TOST equivalence at level alpha: the (1 - 2 alpha) t-interval inside ± margin
    eval_noise_variance the part of a seed's paired difference that is evaluation-sample noise
    spending            Lan-DeMets O'Brien-Fleming alpha spending for adding seeds in blocks
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import integrate, optimize, special, stats

ALPHA = 0.05
POWER = 0.8

MIN_EFFECT = {"Judge": 0.25, "default": 0.05}
"""Minimum effects of interest in each metric's own units (oracle scores and accuracies: 0.05; the
judge is z-scored: 0.25). A suite's report spec `min_effect` (a number, or a mapping by column
title with an optional 'default') replaces them."""


def min_effects(spec_value: object) -> dict[str, float]:
    """The report spec's `min_effect` as {title or 'default': effect}."""
    if spec_value is None:
        return dict(MIN_EFFECT)
    if isinstance(spec_value, dict):
        return {**MIN_EFFECT, **{str(k): float(v) for k, v in spec_value.items()}}
    return {"default": float(spec_value)}


def min_effect_of(effects: dict[str, float], title: str) -> float:
    return effects.get(title, effects.get("default", MIN_EFFECT["default"]))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (same order as given; NaN stays NaN).

    Sorted ascending, p_(k) is multiplied by (m - k) (k from 0), the running maximum makes the
    adjusted values monotone, and they are capped at 1. Reject H_k at level alpha iff adjusted <= alpha.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full_like(p, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adjusted
    return out


def paired_p(differences: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test that the mean per-seed difference is 0.

    With no spread the test degenerates: identical non-zero differences are certain (p = 0),
    all-zero differences carry no evidence (p = 1); fewer than two seeds give NaN.
    """
    d = np.asarray([v for v in differences if math.isfinite(v)], dtype=float)
    if d.size < 2:
        return math.nan
    if np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):  # no spread, up to rounding
        return 0.0 if abs(d.mean()) > 1e-12 else 1.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


def tost_half_width(differences: Sequence[float], alpha: float = ALPHA) -> float:
    """Half-width of the (1 - 2 alpha) t-interval of the mean (the 90% interval at alpha 5%); NaN below 2."""
    d = np.asarray([v for v in differences if math.isfinite(v)], dtype=float)
    if d.size < 2:
        return math.nan
    return float(stats.t.ppf(1 - alpha, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))


def equivalent(differences: Sequence[float], margin: float, alpha: float = ALPHA) -> bool:
    """TOST (two one-sided t-tests) at level alpha: the mean paired difference is within ± margin.

    Both one-sided nulls (mean <= -margin, mean >= +margin) are rejected at alpha exactly when the
    (1 - 2 alpha) t-interval lies inside (-margin, margin): |mean| + t_{1-alpha, n-1} s / sqrt(n) < margin.
    Identical differences (s = 0) are equivalent when |mean| < margin. Fewer than two seeds: never.
    """
    d = np.asarray([v for v in differences if math.isfinite(v)], dtype=float)
    if d.size < 2 or not margin > 0:
        return False
    return bool(abs(float(d.mean())) + tost_half_width(d, alpha) < margin)


def eval_noise_variance(values: Sequence[float], prompts: Sequence[object]) -> float:
    """Variance of the mean of one seed's per-video values that comes from evaluation sampling alone.

    ``values`` are one seed's per-video paired differences (row's video minus the baseline's video of
    the same prompt, sample and initial noise) and ``prompts`` their prompts. The prompt set is fixed
    (every seed evaluates the same held-out prompts), so what more eval videos would average away is the
    spread between videos *of one prompt*: the pooled within-prompt variance
    s_w^2 = sum_p sum_k (d_pk - mean_p)^2 / sum_p (n_p - 1), and the seed mean's eval-noise variance is
    s_w^2 / m, m the seed's videos (for equal n_p the same as (1/m^2) sum_p n_p s_p^2). NaN when no prompt
    has two videos.
    """
    d = np.asarray(values, dtype=float)
    keys = np.asarray([str(p) for p in prompts], dtype=object)
    ok = np.isfinite(d)
    d, keys = d[ok], keys[ok]
    if d.size == 0:
        return math.nan
    _, code = np.unique(keys, return_inverse=True)
    counts = np.bincount(code)
    means = np.bincount(code, weights=d) / counts
    dof = int((counts - 1).sum())
    if dof == 0:
        return math.nan
    within = float(((d - means[code]) ** 2).sum() / dof)
    return within / d.size


def t_power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided one-sample (paired) t-test with n seeds against a true mean `effect`.

    Exact, from the noncentral t distribution with n-1 degrees of freedom and noncentrality
    effect / (sd / sqrt(n)): P(T > crit) + P(T < -crit). At effect 0 it equals alpha. scipy's
    ``nct.cdf`` of the far lower tail is NaN at large noncentrality (df 1 from nc ~ 6.5, where the tail
    is below Phi(-nc) ~ 1e-10); either tail that scipy does not give as a probability is integrated
    instead (``_tail``), so a failed tail never reads as power 1.
    """
    if n < 2 or not (sd > 0):
        return math.nan
    df, nc = n - 1, abs(effect) / (sd / math.sqrt(n))
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    with np.errstate(all="ignore"):
        upper = float(stats.nct.sf(crit, df, nc))
        lower = float(stats.nct.cdf(-crit, df, nc))
    if not 0.0 <= upper <= 1.0:  # NaN included
        upper = _tail(crit, df, nc, upper=True)
    if not 0.0 <= lower <= 1.0:
        lower = _tail(crit, df, nc, upper=False)
    return min(1.0, upper + lower)


def _tail(crit: float, df: int, nc: float, upper: bool) -> float:
    """P(T > crit) (upper) or P(T < -crit) for T = (Z + nc) / (W / sqrt(df)), W ~ chi(df), by quadrature.

    Given W = w the event is Z > crit * w / sqrt(df) - nc (resp. Z < -crit * w / sqrt(df) - nc): a normal
    tail, integrated against the chi density (finite and smooth, unlike chi2's at df 1) over its central
    1 - 2e-15, split at the density's mode and where the normal tail turns. The lower tail is below
    Phi(-nc) for nc >= 0 (its integrand is); where that bound is below 1e-300 it is 0.
    """
    if not upper and special.ndtr(-nc) < 1e-300:
        return 0.0
    sign, scale = (1.0 if upper else -1.0), crit / math.sqrt(df)

    def integrand(w: float) -> float:
        return float(special.ndtr(sign * nc - scale * w) * stats.chi.pdf(w, df))

    lo, hi = float(stats.chi.ppf(1e-15, df)), float(stats.chi.isf(1e-15, df))
    turns = [w for w in (math.sqrt(max(df - 1, 0)), nc / scale if upper else 0.0) if lo < w < hi]
    value = integrate.quad(integrand, lo, hi, points=sorted(set(turns)) or None, limit=200)[0]
    return float(min(1.0, max(0.0, value)))


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable effect: the true mean difference detected with probability `power`."""
    if n < 2 or not (sd > 0):
        return math.nan
    df = n - 1  # the t-quantile sum is close to the answer; twice it brackets the root
    hi = 2 * (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n)
    return float(optimize.brentq(lambda d: t_power(d, sd, n, alpha) - power, 0.0, hi, xtol=sd * 1e-9))


def seeds_needed(effect: float, sd: float, alpha: float = ALPHA, power: float = POWER,
                 max_seeds: int = 100_000) -> int | None:
    """The smallest n >= 2 whose paired t-test has `power` against `effect` (None past max_seeds)."""
    if not (sd > 0) or effect == 0 or not math.isfinite(effect):
        return None
    lo, hi = 2, 2
    while t_power(effect, sd, hi, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > max_seeds:
            return None
    while lo < hi:  # power is increasing in n: bisect for the first n that reaches it
        mid = (lo + hi) // 2
        if t_power(effect, sd, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


def spending(fraction: float, alpha: float = ALPHA) -> float:
    """Lan-DeMets O'Brien-Fleming-type cumulative alpha spent at information fraction t in (0, 1].

    alpha(t) = 2 - 2 * Phi(z_{1-alpha/2} / sqrt(t)): almost nothing is spent at early looks and
    alpha(1) = alpha. A look at n_k of at most N seeds has t = n_k / N.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"information fraction must be in (0, 1], got {fraction!r}")
    z = stats.norm.ppf(1 - alpha / 2)
    return float(2 - 2 * stats.norm.cdf(z / math.sqrt(fraction)))


def look_levels(seeds_at_looks: Sequence[int], max_seeds: int, alpha: float = ALPHA) -> list[float]:
    """Nominal two-sided level of each look: the alpha newly spent at that look.

    Testing look k at alpha(t_k) - alpha(t_{k-1}) keeps the chance of any false decision over all
    looks <= alpha by the union bound (conservative: it ignores the correlation between looks).
    """
    levels, spent = [], 0.0
    for n in seeds_at_looks:
        total = spending(min(n, max_seeds) / max_seeds, alpha)
        levels.append(max(total - spent, 0.0))
        spent = max(spent, total)
    return levels
