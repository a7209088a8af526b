"""Learning at equal compute (docs/statistics.md "Equal compute"): the table of each row's held-out oracle
learning at the training compute where the cheapest row of its setting ends, and the figure of held-out oracle
learning against training compute.

Compute is ``compute_training`` (grpo_bench/train/compute.py: rollout, KL-reference and training forwards and
the training backwards, in sample-step passes), counted by the cell or, for cells stored before the counters,
derived from its config (``data.compute_curves``). Evaluations exist only at the eval points (the shipped world
suites: updates 0, 45 and 90), so a row evaluated at a compute between two of its eval points gets the straight
line between them: **interpolated**, and the table says so row by row; the cheapest row is always measured
(the matched compute is its last eval point). Learning = the eval at the matched compute minus the same seed's
eval at update 0; intervals are t-intervals over seeds (one value per seed, as Table 2), and differences
against the cheapest row are paired by seed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from grpo_bench.config import metrics
from grpo_bench.report import data
from grpo_bench.report.parts import FIGURES, TABLES, Context, Section
from grpo_bench.report.stats import mean_ci

ORACLE = "eval_oracle_overall"
COMPUTE = metrics.COMPUTE_TRAINING


def eval_compute(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, eval point): the held-out oracle and its learning (minus the same cell's update-0
    eval, the seed's base model), the training compute and seconds at that point, and whether the compute is
    derived. Cells without an update-0 eval or an oracle are left out."""
    ev = data.eval_curves(df)
    if ev.empty or ORACLE not in ev:
        return pd.DataFrame()
    comp = data.compute_curves(df)[["cell", "update", COMPUTE, metrics.COMPUTE_SECONDS, "derived"]]
    ev = ev.merge(comp, on=["cell", "update"], how="left")
    ev = ev[ev[ORACLE].notna()]
    base = ev[ev["update"] == 0].set_index("cell")[ORACLE]
    ev = ev[ev["cell"].isin(base.index)].copy()
    ev["learning"] = ev[ORACLE] - ev["cell"].map(base)
    method = data.cells(df).set_index("cell")["method"]
    ev["method"] = ev["cell"].map(method)
    return ev.sort_values(["cell", "update"]).reset_index(drop=True)


def at_compute(points: pd.DataFrame, budget: float) -> tuple[float, str]:
    """(learning, how) of one cell at training compute ``budget``: measured at an eval point of that compute,
    else the straight line between the two eval points around it; NaN beyond the cell's last point."""
    c, y, u = points[COMPUTE].to_numpy(float), points["learning"].to_numpy(float), points["update"].to_numpy()
    hit = np.isclose(c, budget, rtol=1e-9, atol=0.5)
    if hit.any():
        i = int(np.flatnonzero(hit)[0])
        return float(y[i]), f"update {u[i]} (measured)"
    after = np.flatnonzero(c > budget)
    if not len(after) or after[0] == 0:
        return math.nan, "not reached"
    b = int(after[0])
    a = b - 1
    w = (budget - c[a]) / (c[b] - c[a])
    return float(y[a] + w * (y[b] - y[a])), f"updates {u[a]}–{u[b]} (interpolated, {w:.0%} of the way)"


def matched(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell: its setting's matched compute (the smallest final training compute among the setting's rows,
    a row's final compute being the least over its cells), its learning there and how it was read, its own
    final compute, seconds and learning at its end."""
    ev = eval_compute(df)
    if ev.empty or ev[COMPUTE].isna().all():
        return pd.DataFrame()
    ends = ev.groupby("cell").tail(1).set_index("cell")
    ends = ends[ends["update"] > 0]
    out, order = [], data.group_order(df)
    for setting, part in ends.groupby("setting", sort=False):
        finish = part.groupby("group")[COMPUTE].min()
        budget = float(finish.min())
        cheapest = next(g for g in order if g in finish.index and finish[g] == budget)  # ties: the first row
        for cell, end in part.iterrows():
            value, how = at_compute(ev[ev["cell"] == cell], budget)
            out.append({"setting": setting, "group": end["group"], "method": end["method"], "seed": end["seed"],
                        "cell": cell, "matched_compute": budget, "cheapest": cheapest, "learning_matched": value,
                        "how": how, "final_compute": end[COMPUTE], "final_seconds": end[metrics.COMPUTE_SECONDS],
                        "learning_end": end["learning"], "derived": bool(end["derived"])})
    return pd.DataFrame(out)


def _fmt(mean: float, half: float, sign: bool = True) -> str:
    if not math.isfinite(mean):
        return "–"
    text = f"{mean:+.3f}" if sign else f"{mean:.3f}"
    return text if not math.isfinite(half) else f"{text} ± {half:.3f}"


def _how(values: pd.Series) -> str:
    kinds = list(dict.fromkeys(values))
    return kinds[0] if len(kinds) == 1 else "; ".join(kinds)


def _units(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:,.0f}"


@TABLES.register("equal_compute")
def equal_compute_table(ctx: Context) -> list[Section]:
    from grpo_bench.report.tables import write_table

    title = "Learning at equal compute (held-out oracle)"
    mt = matched(ctx.df)
    if mt.empty:
        return [Section(title, "Not available: no held-out oracle evaluations at update 0 and after training.", "")]
    order = data.group_order(ctx.df)
    rows, csv = [], []
    for setting, part in mt.groupby("setting", sort=False):
        cheapest = part["cheapest"].iloc[0]
        ref = part[part["group"] == cheapest].set_index("seed")["learning_matched"]
        for group in [g for g in order if g in set(part["group"])]:
            mine = part[part["group"] == group]
            at = mean_ci(mine["learning_matched"].tolist())
            end = mean_ci(mine["learning_end"].tolist())
            own = mine.set_index("seed")["learning_matched"]
            seeds = sorted(set(own.index) & set(ref.index))
            diff = mean_ci((own.loc[seeds] - ref.loc[seeds]).tolist()) if group != cheapest else (math.nan,) * 3
            final = float(mine["final_compute"].median())
            budget = float(mine["matched_compute"].iloc[0])
            secs = float(mine["final_seconds"].mean())
            rows.append([setting, group, str(at[2]), _units(final), f"{final / budget:.2f}×",
                         "–" if not math.isfinite(secs) else f"{secs:.0f}", _units(budget), _how(mine["how"]),
                         _fmt(at[0], at[1]), "–" if group == cheapest else _fmt(diff[0], diff[1]),
                         _fmt(end[0], end[1])])
            csv.append({"setting": setting, "group": group, "seeds": at[2], "final_compute": final,
                        "compute_ratio": final / budget, "final_seconds": secs, "matched_compute": budget,
                        "how": _how(mine["how"]), "learning_matched": at[0], "learning_matched_ci": at[1],
                        "diff_vs_cheapest": diff[0], "diff_vs_cheapest_ci": diff[1], "diff_seeds": diff[2],
                        "learning_end": end[0], "learning_end_ci": end[1], "derived": bool(mine["derived"].any())})
    headers = ["Setting", "Method", "seeds", "compute to finish", "× cheapest", "seconds", "matched compute",
               "eval read at", "Oracle at matched", "− cheapest", "Oracle at end"]
    md = write_table(ctx.out, "equal_compute", headers, rows, pd.DataFrame(csv), "llrrrrrlrrr")
    derived = bool(mt["derived"].any())
    return [Section(
        title,
        "Compute = training sample-step passes (rollout, KL-reference and training forwards + training backwards; "
        "docs/statistics.md)" + (", derived from each cell's stored config for cells run before the counters" if
        derived else "") + "; seconds = the rollout, reward and training phases' time to finish (mean over seeds). "
        "Matched compute = where the cheapest row of the setting ends; each row's held-out oracle learning (eval "
        "minus the same seed's update-0 eval) is read there: measured at an eval point, else interpolated on the "
        "straight line between the two eval points around it (the column says which). Mean ± 95% t-interval over "
        "seeds; − cheapest = paired by seed against the cheapest row. Oracle at end = Table 2's column, at each "
        "row's own compute.",
        md)]


def at_eval_points(rows: pd.DataFrame) -> pd.DataFrame:
    """One row's eval points placed at the mean compute its seeds had spent there: where that compute differs by
    seed (TempFlow-GRPO branches at a random step, so a step's cost varies), each seed at its own compute would
    make the band step back and forth along x; one x per eval point keeps a line per row running forward."""
    out = rows.copy()
    out[COMPUTE] = out.groupby("update")[COMPUTE].transform("mean")
    return out


@FIGURES.register("oracle_vs_compute")
def oracle_vs_compute(ctx: Context) -> list[Section]:
    """One figure per family, one small panel per row (grpo_bench/report/small_multiples.py): ten rows'
    bands in one panel hid each other."""
    from grpo_bench.report.figures import _colours, _markers, _save
    from grpo_bench.report.small_multiples import small_multiples

    title = "Held-out oracle learning against training compute"
    ev = eval_compute(ctx.df)
    if ev.empty or ev[COMPUTE].isna().all():
        return [Section(title, "Not available: no held-out oracle evaluations with compute.", "")]
    mt = matched(ctx.df)
    groups = data.group_order(ctx.df)
    marks = {g: {**m, "markevery": 1} for g, m in _markers(groups).items()}
    derived = " (derived from the stored configs)" if bool(ev["derived"].any()) else ""
    how = (f"One panel per row: its mean held-out oracle learning over seeds at its eval points, placed at the "
           f"training compute it had spent there{derived}, with the 95% band over seeds; the family's other rows "
           "are the thin grey lines behind it, on the same axes. The dashed line is the matched compute of the "
           "equal-compute table. Between markers a line is only a guide (no eval there).")
    sections = []
    for setting in dict.fromkeys(ev["setting"]):
        part = ev[ev["setting"] == setting]
        lines = {g: at_eval_points(part[part["group"] == g]) for g in groups if g in set(part["group"])}
        colour = _colours(list(lines))  # its own rows: ten get tab10, not tab20's pale half
        budget = mt.loc[mt["setting"] == setting, "matched_compute"]

        def decorate(ax, budget=budget):
            if len(budget):
                ax.axvline(float(budget.iloc[0]), color="0.4", ls="--", lw=0.9)
            ax.axhline(0.0, color="0.7", lw=0.6)
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))

        fig = small_multiples(lines, colour, COMPUTE, "learning", marks=marks, decorate=decorate,
                              xlabel="training compute (sample-step passes)",
                              ylabel="held-out oracle, change from update 0", title=f"Setting {setting}")
        sections.append(Section(f"{title}, Setting {setting}", how, _save(ctx, fig, f"oracle_vs_compute_{setting}")))
    return sections


def learning_at(df: pd.DataFrame, group_filter: dict[str, Any], budget: float) -> pd.Series:
    """Per seed, the learning at training compute ``budget`` of the cells whose config matches
    ``group_filter`` (used by the claims ledger)."""
    ev = eval_compute(df)
    if ev.empty:
        return pd.Series(dtype=float)
    configs = data.cells(df).set_index("cell")["config"]
    keep = [c for c in ev["cell"].unique() if all(configs[c].get(k) == v for k, v in group_filter.items())]
    return pd.Series({ev.loc[ev["cell"] == c, "seed"].iloc[0]: at_compute(ev[ev["cell"] == c], budget)[0]
                      for c in keep}, dtype=float)
