"""``Faster``: a speed claim, tested at equal quality on training compute (grpo_bench/train/compute.py).

"A reaches B's quality with a fraction f of B's compute": per seed, A's held-out learning read at f × B's
training compute to finish (measured at an eval point, else interpolated between the two around it, as the
equal-compute table reads it: ``report/equal_compute.py``; at A's own end where A finishes sooner) minus B's
learning at B's end, paired by seed. A non-inferiority test with the suite's minimum effect as margin decides:
supported when the one-sided 95% lower bound of the mean difference lies above −margin (A at f × B's compute is
no worse than B by the margin), contradicted when the upper bound lies below −margin (it is worse by more),
undecided otherwise, with the seeds for 80% power. The finding also states A's and B's compute to finish, so
the ratio the paper quotes is read off beside the test. Rows that are absent leave the check *not tested*,
naming the suite that would make them (``tested_by``): never another row in their place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from grpo_bench.report.claims.finding import CONTRADICTED, NOT_TESTED, SUPPORTED, UNDECIDED, Finding, t_strength
from grpo_bench.report.claims.suite import Suite, Where, short_label, where_text
from grpo_bench.report.power import ALPHA, seeds_needed

METRICS = {"Oracle": "learning"}
"""The metric a speed claim is read on: the held-out oracle (equal_compute.eval_compute's learning)."""


@dataclass(frozen=True)
class Faster:
    """``row`` learns at least as much (``metric``, within the suite's min effect) with ``fraction`` of the
    training compute that ``versus`` needs to finish, within each family (``within``, split by ``split``)."""

    row: Where
    versus: Where
    fraction: float
    tested_by: str
    """The suite file whose cells this check reads (named when they are absent)."""
    metric: str = "Oracle"
    within: Where = field(default_factory=dict)
    split: tuple[str, ...] = ()
    quantifier: str = "every"

    @property
    def what(self) -> str:
        scope = [*([where_text(self.within)] if self.within else []), *(f"per {k}" for k in self.split)]
        rival = where_text(self.versus)
        return (f"{where_text(self.row)} at {_fraction(self.fraction)} the training compute of {rival} "
                f"vs {rival} at its end" + (f" ({', '.join(scope)})" if scope else "")
                + f": paired {self.metric} learning, non-inferior")

    def findings(self, suite: Suite) -> list[Finding]:
        from grpo_bench.report.equal_compute import COMPUTE, at_compute, eval_compute

        ev = eval_compute(suite.df)
        out = []
        for family, cells in suite.families(self.within, self.split).items():
            rows, rivals = suite.groups(cells, self.row), suite.groups(cells, self.versus)
            where = f" ({family})" if family else ""
            if len(rows) != 1 or len(rivals) != 1:
                missing = where_text(self.row) if len(rows) != 1 else where_text(self.versus)
                out.append(self.not_tested(f"{missing}{where}: {len(rows)} / {len(rivals)} rows match in "
                                           f"`{suite.name}`"))
                continue
            mine = ev[ev["cell"].isin(cells)]
            a, b = mine[mine["group"] == rows[0]], mine[mine["group"] == rivals[0]]
            ends_b = b.groupby("cell").tail(1)
            ends_a = a.groupby("cell").tail(1)
            if a.empty or ends_b.empty or ends_b[COMPUTE].isna().any() or ends_a[COMPUTE].isna().any():
                out.append(self.not_tested(f"{where_text(self.row)}{where}: no held-out oracle with compute"))
                continue
            finish_b, finish_a = float(ends_b[COMPUTE].median()), float(ends_a[COMPUTE].median())
            budget = min(self.fraction * finish_b, finish_a)
            at_a = {p["seed"].iloc[0]: at_compute(p, budget)[0] for _, p in a.groupby("cell")}
            end_b = dict(zip(ends_b["seed"], ends_b["learning"]))
            seeds = sorted(set(at_a) & set(end_b))
            d = np.array([at_a[s] - end_b[s] for s in seeds], dtype=float)
            d = d[np.isfinite(d)]
            label = f"{short_label(rows[0], self.split)} − {short_label(rivals[0], self.split)}{where}"
            ratio = f"compute to finish {finish_a:,.0f} vs {finish_b:,.0f} ({finish_a / finish_b:.2f}×)"
            found = self._decide(label, d, suite.min_effect(self.metric), ratio, budget)
            standing = suite.standing(cells, rows[0], rivals[0])
            if standing:  # measured and shown, not decided
                verdict, why, needed = standing
                found = Finding(label, verdict, f"{found.effect}; {verdict}: {why}", needed=needed)
            out.append(found)
        return out or [self.not_tested(f"no rows in `{suite.name}`")]

    def not_tested(self, why: str) -> Finding:
        return Finding(why, NOT_TESTED, f"not tested: {why}", math.nan, f"a run of `{self.tested_by}`")

    def _decide(self, label: str, d: np.ndarray, margin: float, ratio: str, budget: float) -> Finding:
        n = len(d)
        mean = float(d.mean()) if n else math.nan
        strength, sd = t_strength(d, mean + margin, n) if n else (math.nan, math.nan)
        half = float(stats.t.ppf(1 - ALPHA, n - 1) * sd / math.sqrt(n)) if n >= 2 and sd > 0 else 0.0
        effect = (f"{mean:+.3f} (one-sided 95% bound {mean - half:+.3f}; margin −{margin:g}) at compute "
                  f"{budget:,.0f}; {ratio} ({n} seed{'s' if n != 1 else ''})") if n else f"no paired seeds; {ratio}"
        if n < 2:
            return Finding(label, UNDECIDED, effect, math.nan, None)
        # The one-sided p of the side the estimate lies on (no worse than -margin, or worse by more), so the
        # ledger-wide Holm family can re-decide it as it does a t-test (claims/rendering.py ``ledger_wide``).
        toward = 1 if mean > -margin else -1
        p = float(stats.t.sf(toward * (mean + margin) / (sd / math.sqrt(n)), n - 1)) if sd > 0 else 0.0
        tested = {"p": p, "toward": toward}
        if mean - half > -margin:
            return Finding(label, SUPPORTED, effect, strength, **tested)
        if mean + half < -margin:
            return Finding(label, CONTRADICTED, effect, strength, **tested)
        return Finding(label, UNDECIDED, effect, strength, seeds_needed(margin, sd) if sd > 0 else None, **tested)


def _fraction(f: float) -> str:
    """'1/3 of', '0.5 ×' ... as the claim reads."""
    inverse = 1 / f
    if f < 1 and abs(inverse - round(inverse)) < 1e-9:
        return f"1/{round(inverse)} of"
    return f"{f:g} ×"
