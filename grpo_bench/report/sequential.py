"""Sequential seeds: when ``run --until-decided`` may stop adding seeds (docs/statistics.md).

The suite runs its seeds, then adds seeds in blocks up to ``decide.max_seeds``; after each block
(a *look*) every headline comparison of the power table is tested again. Looking repeatedly and
stopping at the first good-looking result inflates false decisions, so look k is tested at the level
that the Lan-DeMets O'Brien-Fleming spending function newly spends there
(``power.look_levels``: alpha(t_k) - alpha(t_{k-1}), t = seeds / max_seeds). The levels sum to the
overall alpha, so by the union bound over looks, and Holm within a look, the chance of any false
"effect" decision over the whole run stays below alpha.

A comparison is decided at a look when, over its per-seed paired differences,

    effect   its Holm-adjusted paired-t p-value (family: the comparisons given) is <= the look's level,
             i.e. the interval at the look's level excludes 0
    precise  otherwise, when the half-width of the interval at the look's level is below the minimum
             effect: more seeds would not change what can be said at that scale

and stays decided at later looks (the run no longer needs it). Everything here is pure: numbers in,
verdicts out; ``grpo_bench.cli.decide`` runs the cells and stores the looks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from grpo_bench.report.power import ALPHA, holm, look_levels, paired_p

SPENDING = "Lan-DeMets O'Brien-Fleming"
EFFECT, PRECISE, OPEN = "effect", "precise", "open"


@dataclass(frozen=True)
class Decision:
    """One comparison at one look."""

    verdict: str
    """effect, precise or open (module docstring)."""
    n: int
    diff: float
    half: float
    """Half-width of the two-sided t-interval at the look's level (inf below 2 seeds or at level 0)."""
    p_holm: float
    level: float

    def to_dict(self) -> dict:
        return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in asdict(self).items()}


def planned_looks(start: int, block: int, max_seeds: int) -> list[int]:
    """Seeds at each planned look: the suite's own seeds, then one block more per look, ending at max_seeds."""
    if not 1 <= start <= max_seeds or block < 1:
        raise ValueError(f"need 1 <= start ({start}) <= max_seeds ({max_seeds}) and block >= 1 ({block})")
    return [*range(start, max_seeds, block), max_seeds]


def half_width(d: np.ndarray, level: float) -> float:
    """Half-width of the two-sided (1 - level) t-interval of the mean of d."""
    if d.size < 2 or not level > 0:
        return math.inf
    return float(stats.t.ppf(1 - level / 2, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))


def decide_look(differences: Mapping[Hashable, Sequence[float]], min_effect: Mapping[Hashable, float] | float,
                look: int, planned: Sequence[int], alpha: float = ALPHA) -> dict[Hashable, Decision]:
    """Verdict of every comparison at ``look`` (1-based) of the ``planned`` looks (seeds at each look,
    the last one the maximum), from its per-seed paired differences (NaN dropped). ``min_effect`` is
    one number or one per comparison. The comparisons given form one Holm family."""
    if not 1 <= look <= len(planned):
        raise ValueError(f"look {look} is not one of the {len(planned)} planned looks")
    level = look_levels(planned, planned[-1], alpha)[look - 1]
    keys = list(differences)
    clean = {k: np.asarray([v for v in differences[k] if math.isfinite(v)], dtype=float) for k in keys}
    adjusted = holm([paired_p(clean[k]) for k in keys])
    out = {}
    for key, p_adj in zip(keys, adjusted):
        d = clean[key]
        effect = min_effect if isinstance(min_effect, (int, float)) else min_effect[key]
        half = half_width(d, level)
        if math.isfinite(p_adj) and p_adj <= level:
            verdict = EFFECT
        elif half < effect:
            verdict = PRECISE
        else:
            verdict = OPEN
        out[key] = Decision(verdict, int(d.size), float(d.mean()) if d.size else math.nan, half, float(p_adj), level)
    return out


def evaluate_look(df, baseline: dict, min_effect_spec: object, look: int, planned: Sequence[int],
                  alpha: float = ALPHA, previous: Sequence[Mapping] = ()) -> list[dict]:
    """The power table's headline comparisons (``power_table.paired_differences``) decided at ``look``:
    one dict per comparison with data (setting, row, metric, verdict, since, n, diff, half, p_holm, level),
    Holm within each setting as in the power table; a comparison decided at an earlier look
    (``previous``: the last stored look's list) keeps that verdict and its look in ``since``."""
    from grpo_bench.report.power_table import min_effect_of, min_effects, paired_differences

    effects = min_effects(min_effect_spec)
    earlier = {(c["setting"], c["row"], c["metric"]): c for c in previous if c.get("verdict") != OPEN}
    found = [c for c in paired_differences(df, baseline) if c["diffs"].notna().any()]
    out = []
    for setting in dict.fromkeys(c["setting"] for c in found):
        family = {(c["setting"], c["row"], c["metric"]): c["diffs"].tolist() for c in found if c["setting"] == setting}
        decided = decide_look(family, {k: min_effect_of(effects, k[2]) for k in family}, look, planned, alpha)
        out += [look_entry({"setting": key[0], "row": key[1], "metric": key[2]}, decision, look, earlier.get(key))
                for key, decision in decided.items()]
    return out


def look_entry(fields: Mapping, decision, look: int, earlier: Mapping | None) -> dict:
    """One comparison's record at ``look``: ``fields`` (setting, row, metric), the decision and ``since``; one
    decided at an earlier look (``earlier``, its stored record) keeps that verdict and look, because the run
    stopped needing it then."""
    entry = {**fields, **decision.to_dict(), "since": look if decision.verdict != OPEN else None}
    if earlier is not None:
        entry["verdict"], entry["since"] = earlier["verdict"], earlier["since"]
    return entry
