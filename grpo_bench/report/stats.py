"""Intervals used by every table: t-intervals over seeds, Wilson intervals for win rates."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95


def mean_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, int]:
    """(mean, half-width of the t-interval, n) over the finite values; half-width NaN when n < 2.

    half = t_{(1+level)/2, n-1} * s / sqrt(n), with s the sample standard deviation (ddof = 1):
    seeds are few (3), so the normal quantile would understate the interval.
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(x[0]), math.nan, 1
    half = stats.t.ppf((1 + level) / 2, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return float(x.mean()), float(half), n


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
