"""What a check yields: one ``Finding`` per comparison, each ``supported``, ``contradicted`` or ``undecided``,
with how firmly it points the claimed way."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SUPPORTED, CONTRADICTED, UNDECIDED = "supported", "contradicted", "undecided"
NOT_TESTED = "not tested"
"""The configuration the claim names is not among the stored results: no other row stands in for it."""
DEPENDS = "depends on the reference"
"""Two references the claim may be read against disagree (Table 1: the ODE's own variance, the data's)."""


@dataclass
class Finding:
    """One comparison of one check."""

    label: str
    verdict: str
    effect: str
    strength: float = math.nan
    """How firmly it points the claimed way (a t-like score); the weakest finding stands for its check."""
    needed: int | str | None = None
    """Seeds (or votes, for a study) to decide an undecided finding, or what it needs instead (text);
    None: not computable or not needed."""
    unit: str = "seeds"

    def need_text(self) -> str:
        return self.needed if isinstance(self.needed, str) else f"{self.needed} {self.unit}"


def t_strength(values: np.ndarray, gap: float, n: int) -> tuple[float, float]:
    """(strength, sd): ``gap`` (> 0 on the claimed side) in standard errors of the ``n`` ``values``, and their
    standard deviation. With no spread to measure (one value, or all equal) the strength is ±inf by the gap's
    sign: the finding still sorts by the side it points to."""
    sd = float(np.std(values, ddof=1)) if n >= 2 else math.nan
    strength = gap / (sd / math.sqrt(n)) if n >= 2 and sd > 0 else math.copysign(math.inf, gap)
    return strength, sd
