"""Intervals used by every table: t-intervals over seeds, Wilson intervals, and cluster-bootstrap intervals
for win rates (correlated observations resampled together)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

LEVEL = 0.95


def mean_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width of the t-interval, n) over the finite values; half-width NaN when n < 2.

    half = t_{(1+level)/2, n-1} * s / sqrt(n), with s the sample standard deviation (ddof = 1):
    seeds are few (3), so the normal quantile would understate the interval.
    """
    # None / pandas NA: a metric a cell did not log (e.g. one reward track's sub-scores)
    x = np.asarray([float(v) for v in values if v is not None and v is not pd.NA], dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(x[0]), math.nan, 1
    half = stats.t.ppf((1 + level) / 2, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return float(x.mean()), float(half), n


def interval_text(low: float, high: float, clusters: int, unit: str = "seed", digits: int = 3) -> str:
    """'[0.250, 1.000]', or 'n/a (1 seed)' when the interval does not exist (fewer than two clusters)."""
    if math.isfinite(low) and math.isfinite(high):
        return f"[{low:.{digits}f}, {high:.{digits}f}]"
    return f"n/a ({clusters} {unit}{'' if clusters == 1 else 's'})"


def wilson(successes: float, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """(rate, low, high): the Wilson score interval; ties may count as half a success."""
    if n == 0:
        return math.nan, math.nan, math.nan
    z = stats.norm.ppf((1 + level) / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return p, centre - half, centre + half


def cluster_bootstrap(values: Sequence[float], clusters: Sequence[Sequence[object]], n_boot: int = 2000,
                      seed: int = 0, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): percentile interval of the mean from a bootstrap that resamples whole clusters.

    Each clustering (e.g. raters, prompts; or seeds) is resampled with replacement independently and an
    observation is weighted by the product of its clusters' draw counts (the "pigeonhole" bootstrap of
    Owen 2007): observations that share a rater or a prompt move together, so correlated votes do not
    pass for independent ones. With a single clustering this is the ordinary cluster bootstrap.
    A clustering with a single cluster (one seed, one rater) says nothing about the spread between
    clusters: the bounds are NaN (``interval_text`` prints "n/a (1 seed)"), not a zero-width interval.
    """
    y = np.asarray(values, dtype=float)
    if len(y) == 0:
        return math.nan, math.nan, math.nan
    codes = [np.unique(np.asarray(c, dtype=object).astype(str), return_inverse=True)[1] for c in clusters]
    if any(code.max() == 0 for code in codes):
        return float(y.mean()), math.nan, math.nan
    rng = np.random.default_rng(seed)
    stats_ = []
    for start in range(0, n_boot, 250):  # chunks keep memory at 250 x len(y)
        b = min(250, n_boot - start)
        w = np.ones((b, len(y)))
        for code in codes:
            k = code.max() + 1
            counts = rng.multinomial(k, np.full(k, 1 / k), size=b)  # draws per cluster
            w *= counts[:, code]
        total = w.sum(axis=1)
        ok = total > 0
        stats_.append((w[ok] @ y) / total[ok])
    boot = np.concatenate(stats_)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return float(y.mean()), float(lo), float(hi)
