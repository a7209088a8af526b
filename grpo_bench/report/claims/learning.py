"""Checks on a suite's learning, paired by seed as Table 2b: ``Beats`` (a row against its competitors) and
``Moves`` (one row's own learning against 0), decided together by a Holm-adjusted paired t-test."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from grpo_bench.report import data
from grpo_bench.report.claims.finding import CONTRADICTED, SUPPORTED, UNDECIDED, Finding, t_strength
from grpo_bench.report.claims.suite import Suite, Where, short_label, where_text
from grpo_bench.report.power import ALPHA, equivalent, holm, paired_p, seeds_needed
from grpo_bench.report.stats import mean_ci
from grpo_bench.report.tables import TABLE2

METRICS = {title: (column, sign) for title, column, sign in TABLE2}
"""Headline title -> (learning column, +1 higher / -1 lower is better), as in Table 2."""

Comparison = tuple[str, np.ndarray, int, float, str]
"""(label, per-seed values, claimed sign, min effect, unit text): one paired comparison to decide."""


def _signed(mean: float, half: float) -> str:
    if not math.isfinite(mean):
        return "–"
    return f"{mean:+.3f}" + (f" ± {half:.3f}" if math.isfinite(half) else "")


def t_decisions(comparisons: list[Comparison]) -> list[Finding]:
    """One finding per comparison, the t-tests Holm-adjusted over the list."""
    adjusted = holm([paired_p(d) for _, d, _, _, _ in comparisons])
    out = []
    for (label, d, sign, margin, what), p in zip(comparisons, adjusted):
        mean, half, n = mean_ci(d)
        strength, sd = t_strength(d, sign * mean, n)
        effect = f"{_signed(mean, half)} {what} ({n} seed{'s' if n != 1 else ''})"
        if n < 2:
            out.append(Finding(label, UNDECIDED, effect, math.nan, None))
        elif math.isfinite(p) and p < ALPHA:
            out.append(Finding(label, SUPPORTED if sign * mean > 0 else CONTRADICTED, effect, strength))
        elif equivalent(d, margin):
            out.append(Finding(label, CONTRADICTED, effect + f", equivalent to 0 within ±{margin:g}", strength))
        else:
            needed = seeds_needed(margin, sd, alpha=ALPHA / len(comparisons)) if sd > 0 else None
            out.append(Finding(label, UNDECIDED, effect, strength, needed))
    return out


def _no_rows(row: Where) -> Finding:
    return Finding(where_text(row), UNDECIDED, "no matching rows in the stored results")


@dataclass(frozen=True)
class Beats:
    """``row`` learns more of ``metric`` than each competitor, paired by seed within each family.

    Families: the cells matching ``within``, split by the config keys ``split``. The row is the group
    matching ``row`` (``prefer`` narrows several); competitors are the groups matching any of ``versus``
    (None: every other group of the family)."""

    row: Where
    versus: tuple[Where, ...] | None = None
    within: Where = field(default_factory=dict)
    split: tuple[str, ...] = ()
    metric: str = "Oracle"
    prefer: Where = field(default_factory=dict)
    quantifier: str = "every"

    @property
    def what(self) -> str:
        rivals = "every other row" if self.versus is None else " / ".join(where_text(v) for v in self.versus)
        scope = [*([where_text(self.within)] if self.within else []), *(f"per {k}" for k in self.split)]
        return (f"{where_text(self.row)} vs {rivals}" + (f" ({', '.join(scope)})" if scope else "")
                + f": paired {self.metric} learning")

    def findings(self, suite: Suite) -> list[Finding]:
        column, sign = METRICS[self.metric]
        tests, notes = [], []
        for family, cells in suite.families(self.within, self.split).items():
            rows = suite.groups(cells, self.row)
            preferred = suite.groups(cells, {**self.row, **self.prefer})
            if len(rows) > 1 and self.prefer:
                rows = [g for g in rows if g in preferred] or rows
            missing = f" (no {where_text(self.prefer)} row)" if self.prefer and not preferred else ""
            if len(rows) != 1:
                notes.append(Finding(f"{family or suite.name}: row {where_text(self.row)}", UNDECIDED,
                                     f"{len(rows)} rows match ({', '.join(rows) or 'none'})"))
                continue
            rivals = [g for g in data.group_order(suite.df) if g != rows[0] and g in (
                suite.groups(cells, {}) if self.versus is None else
                {x for v in self.versus for x in suite.groups(cells, v)})]
            base = suite.per_seed(cells, rows[0], column)
            for rival in rivals:
                other = suite.per_seed(cells, rival, column)
                seeds = base.index.intersection(other.index)
                d = (base.loc[seeds] - other.loc[seeds]).to_numpy()
                label = f"{short_label(rows[0], self.split)}{missing} − {short_label(rival, self.split)}" + (
                    f" ({family})" if family else "")
                tests.append((label, d, sign, suite.min_effect(self.metric), self.metric))
        return t_decisions(tests) + notes if tests else notes or [_no_rows(self.row)]


@dataclass(frozen=True)
class Moves:
    """The learning of ``metric`` of the row matching ``row`` goes the ``direction`` way (+1 up, -1 down)."""

    row: Where
    metric: str
    direction: int
    quantifier: str = "every"

    @property
    def what(self) -> str:
        return f"{where_text(self.row)}: {self.metric} learning {'> 0' if self.direction > 0 else '< 0'}"

    def findings(self, suite: Suite) -> list[Finding]:
        column, _ = METRICS[self.metric]
        tests = []
        for cells in suite.families({}, ()).values():
            for group in suite.groups(cells, self.row):
                d = suite.per_seed(cells, group, column).to_numpy()
                tests.append((group, d, self.direction, suite.min_effect(self.metric), self.metric))
        return t_decisions(tests) if tests else [_no_rows(self.row)]
