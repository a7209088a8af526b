"""Checks on a suite's learning, paired by seed as Table 2b: ``Beats`` (a row against its competitors) and
``Moves`` (one row's own learning against 0), decided together by a Holm-adjusted paired t-test."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from grpo_bench.report import data
from grpo_bench.report.claims.finding import CONTRADICTED, NOT_TESTED, SUPPORTED, UNDECIDED, Finding, t_strength
from grpo_bench.report.claims.suite import Suite, Where, short_label, where_text
from grpo_bench.report.power import ALPHA, holm, paired_p, seeds_needed
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


def tost_p(d: np.ndarray, margin: float) -> float:
    """TOST p-value (the larger of the two one-sided t-tests) that the mean of ``d`` lies within ± margin."""
    from scipy import stats

    d = np.asarray([v for v in d if math.isfinite(v)], dtype=float)
    if d.size < 2 or not margin > 0:
        return math.nan
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd <= 1e-12 * max(1.0, abs(mean)):
        return 0.0 if abs(mean) < margin else 1.0
    se = sd / math.sqrt(d.size)
    lower = float(stats.t.sf((mean + margin) / se, d.size - 1))
    upper = float(stats.t.cdf((mean - margin) / se, d.size - 1))
    return max(lower, upper)


def decide(p: float, toward: int, p_equivalent: float, level: float = ALPHA) -> str:
    """A t-test finding's verdict from its (adjusted) p-values: below ``level`` (5%, or a sequential suite's look
    level) decides the side; else equivalence within ± the minimum effect (its TOST p adjusted over the same
    family) contradicts; else undecided."""
    if math.isfinite(p) and p < level:
        return SUPPORTED if toward > 0 else CONTRADICTED
    if math.isfinite(p_equivalent) and p_equivalent < level:
        return CONTRADICTED
    return UNDECIDED


def at_level(level: float) -> str:
    """'' at 5%; '; level 0.0055' where a sequential suite's look decides at another level."""
    return "" if level == ALPHA else f"; level {level:.2g}"


def t_decisions(comparisons: list[Comparison], level: float = ALPHA) -> list[Finding]:
    """One finding per comparison; the t-tests and the equivalence tests each Holm-adjusted over the list (the
    check's family: an "every" claim is contradicted by equivalence only under that correction), decided at
    ``level`` (claims/look.py: a suite run under a sequential plan is read at its look's level)."""
    raw = [paired_p(d) for _, d, _, _, _ in comparisons]
    raw_eq = [tost_p(d, margin) for _, d, _, margin, _ in comparisons]
    adjusted, adjusted_eq = holm(raw), holm(raw_eq)
    out = []
    for (label, d, sign, margin, what), p, p_eq, p0, q0 in zip(comparisons, adjusted, adjusted_eq, raw, raw_eq):
        mean, half, n = mean_ci(d)
        strength, sd = t_strength(d, sign * mean, n)
        effect = f"{_signed(mean, half)} {what} ({n} seed{'s' if n != 1 else ''}{at_level(level)})"
        toward = 1 if sign * mean > 0 else -1
        tested = {"p": p0, "toward": toward, "p_equivalent": q0, "level": level}
        verdict = decide(p, toward, p_eq, level) if n >= 2 else UNDECIDED
        if verdict == CONTRADICTED and not (math.isfinite(p) and p < level):
            effect += f", equivalent to 0 within ±{margin:g}"
        needed = None
        if verdict == UNDECIDED and n >= 2 and sd > 0:
            needed = seeds_needed(margin, sd, alpha=ALPHA / len(comparisons))
        out.append(Finding(label, verdict, effect, strength if n >= 2 else math.nan, needed, **tested))
    return out


def labelled(label: str, d: np.ndarray, what: str, verdict: str, why: str, needed: str) -> Finding:
    """A comparison the claim cannot rest on (claims/suite.py ``Suite.standing``): what it measured, shown, and
    why it decides nothing; it stays out of the Holm family of the comparisons that do."""
    mean, half, n = mean_ci(d)
    return Finding(label, verdict, f"{_signed(mean, half)} {what} ({n} seed{'s' if n != 1 else ''}); {verdict}: "
                   f"{why}", needed=needed)


def _no_rows(row: Where) -> Finding:
    return Finding(where_text(row), NOT_TESTED, "no matching rows in the stored results")


@dataclass(frozen=True)
class Beats:
    """``row`` learns more of ``metric`` than each competitor, paired by seed within each family.

    Families: the cells matching ``within``, split by the config keys ``split``. The row is the one group
    matching ``row`` exactly: where none matches, the finding is *not tested* (no other row stands in for it).
    Competitors are the groups matching any of ``versus`` (None: every other group of the family). A pair of
    groups whose cells ran on different code (commit or precision) is not decided unless their commits' behaviour
    fingerprints are recorded identical, whole or for the two rows' printed lines (suite.py ``Suite.mixed_code``)."""

    row: Where
    versus: tuple[Where, ...] | None = None
    within: Where = field(default_factory=dict)
    split: tuple[str, ...] = ()
    metric: str = "Oracle"
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
            aside = suite.set_aside_findings(cells, self.row)
            notes += aside
            if not rows and aside:
                continue
            if len(rows) != 1:
                verdict = NOT_TESTED if not rows else UNDECIDED
                found = f"{len(rows)} rows match ({', '.join(rows)})" if rows else "no such row in the stored results"
                notes.append(Finding(f"{family or suite.name}: row {where_text(self.row)}", verdict, found))
                continue
            rivals = [g for g in data.group_order(suite.df) if g != rows[0] and g in (
                suite.groups(cells, {}) if self.versus is None else
                {x for v in self.versus for x in suite.groups(cells, v)})]
            base = suite.per_seed(cells, rows[0], column)
            for rival in rivals:
                label = f"{short_label(rows[0], self.split)} − {short_label(rival, self.split)}" + (
                    f" ({family})" if family else "")
                other = suite.per_seed(cells, rival, column)
                seeds = base.index.intersection(other.index)
                d = (base.loc[seeds] - other.loc[seeds]).to_numpy()
                standing = suite.standing(cells, rows[0], rival)
                mixed = suite.mixed_code(cells, rows[0], rival)
                if standing:
                    notes.append(labelled(label, d, self.metric, *standing))
                elif mixed:
                    notes.append(Finding(label, UNDECIDED, f"pairs cells of different code ({mixed})",
                                         needed=f"a re-run of `{suite.name}` on one commit"))
                else:
                    tests.append((label, d, sign, suite.min_effect(self.metric), self.metric))
        return t_decisions(tests, suite.level) + notes if tests else notes or [_no_rows(self.row)]


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
        tests, notes = [], []
        for cells in suite.families({}, ()).values():
            notes += suite.set_aside_findings(cells, self.row)
            for group in suite.groups(cells, self.row):
                d = suite.per_seed(cells, group, column).to_numpy()
                standing = suite.standing(cells, group)
                if standing:
                    notes.append(labelled(group, d, self.metric, *standing))
                else:
                    tests.append((group, d, self.direction, suite.min_effect(self.metric), self.metric))
        return t_decisions(tests, suite.level) + notes if tests else notes or [_no_rows(self.row)]
