"""What a check yields: one ``Finding`` per comparison, each ``supported``, ``contradicted`` or ``undecided``,
with how firmly it points the claimed way."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grpo_bench.report.power import ALPHA

SUPPORTED, CONTRADICTED, UNDECIDED = "supported", "contradicted", "undecided"
NOT_TESTED = "not tested"
"""The configuration the claim names is not among the stored results: no other row stands in for it."""
NOT_VERIFIED = "not verified"
"""The comparison reads cells of a dirty tree (``+dirty``) whose behaviour no fingerprint records: which code
made them is unknown (claims/provenance.py)."""
NOT_AS_NAMED = "not tested as named"
"""The rows are stored but are not the configuration the claim names: development or tuning seeds, no tuning,
or an lr other than the row's own tuned choice (claims/as_named.py)."""
DEPENDS = "depends on the reference"
"""Two references the claim may be read against disagree (Table 1: the ODE's own variance, the data's)."""
VERDICTS = (SUPPORTED, CONTRADICTED, UNDECIDED, NOT_TESTED, NOT_AS_NAMED, NOT_VERIFIED, DEPENDS)
"""Every verdict a claim can get, in the order the ledger counts them."""


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
    p: float = math.nan
    """The raw two-sided p-value of a paired t-test (NaN for a check that is not one)."""
    toward: int = 0
    """+1: the mean points the claimed way, -1: the other way (t-test findings)."""
    p_equivalent: float = math.nan
    """The TOST p-value of equivalence within ± the minimum effect (t-test findings)."""
    level: float = ALPHA
    """The level its tests are decided at: 5%, or the look's of a suite run under a sequential plan
    (claims/look.py); the ledger-wide reading keeps it."""

    def need_text(self) -> str:
        return self.needed if isinstance(self.needed, str) else f"{self.needed} {self.unit}"


def t_strength(values: np.ndarray, gap: float, n: int) -> tuple[float, float]:
    """(strength, sd): ``gap`` (> 0 on the claimed side) in standard errors of the ``n`` ``values``, and their
    standard deviation. With no spread to measure (one value, or all equal) the strength is ±inf by the gap's
    sign: the finding still sorts by the side it points to."""
    sd = float(np.std(values, ddof=1)) if n >= 2 else math.nan
    strength = gap / (sd / math.sqrt(n)) if n >= 2 and sd > 0 else math.copysign(math.inf, gap)
    return strength, sd
