"""``Faster``: a speed claim, tested at equal quality on training compute (grpo_bench/train/compute.py).

"A reaches B's quality with a fraction f of B's compute": per seed, A's held-out learning at an eval taken at
the compute the claim names (the last update whose training compute is within f × B's compute to finish; A's
own end where A finishes sooner) minus B's learning at B's end, paired by seed. Quality between two evals is not
read off a straight line: where A has no eval at that update the finding is *not tested as named* and names the
update its suite's eval schedule needs (``eval_at``). A non-inferiority test with the suite's minimum effect as
margin decides: supported when the one-sided 95% lower bound of the mean difference lies above −margin (A at
f × B's compute is no worse than B by the margin), contradicted when the upper bound lies below −margin (it is
worse by more), undecided otherwise, with the seeds for 80% power. The finding also states A's and B's compute to
finish, so the ratio the paper quotes is read off beside the test, and the saving's part that is a dropped KL
reference: the KL-reference passes B runs and A does not (compute counters by pass kind add up, so the split is
exact). Rows that are absent leave the check *not tested*, naming the suite that would make them
(``tested_by``): never another row in their place; rows whose cells ran different code (commit or precision) are
shown but not decided unless their behaviour fingerprints join them for those rows (``Suite.mixed_code``), as a
t-test's pair is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from grpo_bench.config.metrics import COMPUTE_REFERENCE, COMPUTE_TRAINING
from grpo_bench.report.claims.finding import (
    CONTRADICTED,
    NOT_AS_NAMED,
    NOT_TESTED,
    SUPPORTED,
    UNDECIDED,
    Finding,
    t_strength,
)
from grpo_bench.report.claims.look import confidence
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
        from grpo_bench.report import data
        from grpo_bench.report.equal_compute import COMPUTE, eval_compute

        ev, curves = eval_compute(suite.df), data.compute_curves(suite.df)
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
            label = f"{short_label(rows[0], self.split)} − {short_label(rivals[0], self.split)}{where}"
            ratio = f"compute to finish {finish_a:,.0f} vs {finish_b:,.0f} ({finish_a / finish_b:.2f}×)"
            reads = {cell: read_point(curves[curves["cell"] == cell], budget) for cell in a["cell"].unique()}
            unread = sorted({u for cell, u in reads.items() if not (a[(a["cell"] == cell)]["update"] == u).any()})
            saving = kl_reference_part(curves, reads, ends_b["cell"].tolist())
            if unread:
                # the quality at the named compute was not measured: a straight line between two evals is not it
                out.append(Finding(label, NOT_AS_NAMED, f"{NOT_AS_NAMED}: no held-out eval at update "
                                   f"{', '.join(map(str, unread))} (the last update within the named compute "
                                   f"{budget:,.0f}); evals at {', '.join(map(str, sorted(set(a['update']))))}; "
                                   f"{ratio}; {saving}",
                                   needed=f"a run of `{self.tested_by}` with an eval at update "
                                   f"{', '.join(map(str, unread))} (its eval_at)"))
                continue
            at_a = {a.loc[a["cell"] == c, "seed"].iloc[0]: float(a.loc[(a["cell"] == c) & (a["update"] == u),
                                                                       "learning"].iloc[0])
                    for c, u in reads.items()}
            end_b = dict(zip(ends_b["seed"], ends_b["learning"]))
            seeds = sorted(set(at_a) & set(end_b))
            d = np.array([at_a[s] - end_b[s] for s in seeds], dtype=float)
            d = d[np.isfinite(d)]
            read = float(np.median([float(curves.loc[(curves["cell"] == c) & (curves["update"] == u),
                                                     COMPUTE].iloc[0]) for c, u in reads.items()]))
            at = f"update {_span(reads.values())} (compute {read:,.0f}, within the named {budget:,.0f})"
            found = self._decide(label, d, suite.min_effect(self.metric), f"{ratio}; {saving}", at, suite.level)
            standing, mixed = suite.standing(cells, rows[0], rivals[0]), suite.mixed_code(cells, rows[0], rivals[0])
            if standing:  # measured and shown, not decided
                verdict, why, needed = standing
                found = Finding(label, verdict, f"{found.effect}; {verdict}: {why}", needed=needed)
            elif mixed:  # as a t-test's pair (learning.py): two behaviours are not one comparison
                found = Finding(label, UNDECIDED, f"{found.effect}; pairs cells of different code ({mixed})",
                                needed=f"a re-run of `{suite.name}` on one commit")
            out.append(found)
        return out or [self.not_tested(f"no rows in `{suite.name}`")]

    def not_tested(self, why: str) -> Finding:
        return Finding(why, NOT_TESTED, f"not tested: {why}", math.nan, f"a run of `{self.tested_by}`")

    def _decide(self, label: str, d: np.ndarray, margin: float, ratio: str, at: str,
                level: float = ALPHA) -> Finding:
        """Non-inferiority at ``level`` one-sided (5%, or a sequential suite's look level: claims/look.py)."""
        n = len(d)
        mean = float(d.mean()) if n else math.nan
        strength, sd = t_strength(d, mean + margin, n) if n else (math.nan, math.nan)
        half = float(stats.t.ppf(1 - level, n - 1) * sd / math.sqrt(n)) if n >= 2 and sd > 0 else 0.0
        effect = (f"{mean:+.3f} (one-sided {confidence(level)} bound {mean - half:+.3f}; margin −{margin:g}) at {at}; "
                  f"{ratio} "
                  f"({n} seed{'s' if n != 1 else ''})") if n else f"no paired seeds; {ratio}"
        if n < 2:
            return Finding(label, UNDECIDED, effect, math.nan, None)
        # The one-sided p of the side the estimate lies on (no worse than -margin, or worse by more), so the
        # ledger-wide Holm family can re-decide it as it does a t-test (claims/rendering.py ``ledger_wide``).
        toward = 1 if mean > -margin else -1
        p = float(stats.t.sf(toward * (mean + margin) / (sd / math.sqrt(n)), n - 1)) if sd > 0 else 0.0
        tested = {"p": p, "toward": toward, "level": level}
        if mean - half > -margin:
            return Finding(label, SUPPORTED, effect, strength, **tested)
        if mean + half < -margin:
            return Finding(label, CONTRADICTED, effect, strength, **tested)
        return Finding(label, UNDECIDED, effect, strength, seeds_needed(margin, sd) if sd > 0 else None, **tested)


def read_point(curve: pd.DataFrame, budget: float) -> int:
    """The update at which a cell's quality stands for ``budget``: the last one whose training compute is within
    it (the faster row never gets more than the claim grants; its end where it finishes sooner)."""
    within = curve[curve[COMPUTE_TRAINING] <= budget + 0.5]
    return int(within["update"].max()) if len(within) else 0


def kl_reference_part(curves: pd.DataFrame, reads: dict[str, int], rival_cells: list[str]) -> str:
    """The saving (the rival's training compute to finish minus the faster row's at its read point, medians over
    seeds) and the part of it that is KL-reference passes the rival runs and the faster row does not (the same
    difference of ``compute_reference`` alone): pass kinds add up, so the split is exact."""
    def at(cell: str, update: int | None, column: str) -> float:
        part = curves[curves["cell"] == cell]
        row = part.iloc[-1] if update is None else part[part["update"] == update].iloc[0]
        return float(row[column])

    def median(values: list[float]) -> float:
        return float(np.median(values)) if values else math.nan

    saving = median([at(c, None, COMPUTE_TRAINING) for c in rival_cells]) - median(
        [at(c, u, COMPUTE_TRAINING) for c, u in reads.items()])
    if not math.isfinite(saving) or saving <= 0:
        return "no saving in training compute"
    ref = median([at(c, None, COMPUTE_REFERENCE) for c in rival_cells]) - median(
        [at(c, u, COMPUTE_REFERENCE) for c, u in reads.items()])
    if not math.isfinite(ref):
        return f"saving {saving:,.0f} passes (KL-reference passes not counted)"
    return f"saving {saving:,.0f} passes, of which a dropped KL reference {max(ref, 0.0):,.0f} " \
           f"({max(ref, 0.0) / saving:.0%})"


def _span(updates: Any) -> str:
    values = sorted(set(updates))
    return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]} by seed"


def _fraction(f: float) -> str:
    """'1/3 of', '0.5 ×' ... as the claim reads."""
    inverse = 1 / f
    if f < 1 and abs(inverse - round(inverse)) < 1e-9:
        return f"1/{round(inverse)} of"
    return f"{f:g} ×"
