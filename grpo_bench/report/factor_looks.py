"""The sequential plan of a factorial suite: what ``run --until-decided`` decides when the suite has a ``design``.

A factorial has no baseline row; its headline is the ``factor_effects`` table's main effects at equal updates (each
level's deviation from the grand mean of the held-out oracle learning). Each seed that holds every design point is
fitted on its own (the suite's model, report/factors.py), which gives one estimate of every main-effect level per
seed; those per-seed estimates are the "paired differences" the sequential rule reads (report/sequential.py:
Holm over the family of every main-effect level, the look's O'Brien-Fleming level, ``effect`` or ``precise`` at
the report's ``min_effect``). When every seed holds every point, the mean and t interval of the per-seed
estimates are exactly the table's seed-clustered estimate and interval, so the run decides what the table shows.

Interactions are left out of the family: at the suite's cost they are read, not decided (a 4 x 4 interaction
alone holds 16 cells, and Holm over them would leave the main effects open for a dozen seeds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from grpo_bench.report.factors import RESPONSE, design_frame, fit_effects, row_name
from grpo_bench.report.power import ALPHA, min_effect_of, min_effects
from grpo_bench.report.sequential import OPEN, decide_look, look_entry
from grpo_bench.report.tables import TABLE2
from grpo_bench.suite.design import in_point_order

METRIC = next(title for title, metric, _ in TABLE2 if metric == RESPONSE)
"""The comparisons' metric: Table 2's title of the response (its ``min_effect`` applies)."""


def per_seed_main_effects(frame: pd.DataFrame, design: Mapping[str, Any]) -> dict[str, list[float]]:
    """row_name -> one estimate per seed (its own fit of the design's model), NaN for a seed that lacks a design
    point or a finished learning (a partial seed's fit would not be the table's model)."""
    factors = {f: list(levels) for f, levels in design["factors"].items()}
    rows = [row_name(f, lv) for f, levels in factors.items() for lv in levels]
    points = {tuple(map(str, p)) for p in design["points"]}
    out: dict[str, list[float]] = {r: [] for r in rows}
    for _, part in frame.dropna(subset=["y"]).groupby("seed", sort=True):
        held = set(map(tuple, part[list(factors)].astype(str).to_numpy().tolist()))
        if not points <= held:
            fitted = dict.fromkeys(rows, math.nan)
        else:
            got = fit_effects(part, factors, design["estimates"], "y")
            fitted = {row_name(r.effect, r.level): r.estimate for r in got.itertuples() if r.effect in factors}
        for r in rows:
            out[r].append(float(fitted[r]))
    return out


def evaluate_design_look(df: pd.DataFrame, design: Mapping[str, Any], min_effect_spec: object, look: int,
                         planned: Sequence[int], alpha: float = ALPHA, previous: Sequence[Mapping] = ()) -> list[dict]:
    """The design's main-effect levels decided at ``look``, in the record format of
    ``sequential.evaluate_look`` (setting, row, metric, verdict, since, n, diff, half, p_holm, level);
    ``min_effect_spec`` is the report spec's ``min_effect``; a level decided at an earlier look keeps that
    verdict and look."""
    min_effect = min_effect_of(min_effects(min_effect_spec), METRIC)
    design = in_point_order(dict(design))
    frame = design_frame(df, design)
    if frame.empty:
        return []
    cells = df[(df["kind"] == "cell") & df["cell"].isin(frame["cell"])]
    setting = "+".join(sorted(cells["setting"].dropna().astype(str).unique())) or "–"
    differences = per_seed_main_effects(frame, design)
    earlier = {c["row"]: c for c in previous if c.get("verdict") != OPEN}
    return [look_entry({"setting": setting, "row": row, "metric": METRIC}, decision, look, earlier.get(row))
            for row, decision in decide_look(differences, min_effect, look, planned, alpha).items()]
