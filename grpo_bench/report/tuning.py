"""The tuning grid's report: each method's training-side learning at every grid point (the ``tuning`` table)
and against the tuned key (``tuning_curves``), the chosen point marked, the band over tuning seeds.

Both read the tuning suite's results (update rows of the selection metric; never an eval row) and the rule
recorded in ``chosen.json`` beside them (suite/selection.py), so they draw what the selection saw.
"""

from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from grpo_bench.report import data  # noqa: E402
from grpo_bench.report.compact import save_figure  # noqa: E402
from grpo_bench.report.parts import FIGURES, TABLES, Context, Section  # noqa: E402
from grpo_bench.report.stats import mean_ci  # noqa: E402
from grpo_bench.suite.selection import CHOSEN, cell_learning  # noqa: E402
from grpo_bench.suite.tune import SelectRule  # noqa: E402


def _rule_and_chosen(ctx: Context) -> tuple[SelectRule, dict]:
    path = next((f / CHOSEN for f in (ctx.out, ctx.out.parent) if (f / CHOSEN).is_file()), ctx.out / CHOSEN)
    if path.is_file():
        chosen = json.loads(path.read_text())
        return SelectRule(chosen.get("metric", "reward"), int(chosen.get("window", 10))), chosen
    return SelectRule(), {}


def _learning(ctx: Context) -> tuple[pd.DataFrame, list[str], SelectRule, dict]:
    df = data.with_grid_columns(ctx.df)
    keys = [k for k in data.varied_keys(df) if k != "method"]
    rule, chosen = _rule_and_chosen(ctx)
    return cell_learning(df, rule, keys), keys, rule, chosen


def _point_label(row: pd.Series, keys: list[str]) -> str:
    return " ".join(f"{k}={row[k]:g}" if isinstance(row[k], float) else f"{k}={row[k]}" for k in keys)


def edge_choices(learning: pd.DataFrame, keys: list[str], picked: dict[str, dict]) -> list[str]:
    """'method (key=value, lowest|highest of the grid)' for every chosen numeric value on its grid's edge: there
    the grid does not bracket the method's optimum, and the honest next step is a wider grid, not the table."""
    found = []
    for method, point in sorted(picked.items()):
        for key, value in point.items():
            if key not in learning:
                continue
            grid = learning.loc[learning["method"] == method, key]
            if grid.nunique() < 2 or not pd.api.types.is_numeric_dtype(grid):
                continue
            side = "lowest" if value == grid.min() else "highest" if value == grid.max() else None
            if side:
                found.append(f"{method} ({key}={value:g}, the {side} of the grid)")
    return found


@TABLES.register("tuning")
def tuning_table(ctx: Context) -> list[Section]:
    title = "Tuning grid: training-side learning per method and grid point"
    learning, keys, rule, chosen = _learning(ctx)
    if learning.empty:
        return [Section(title, "Not available: no finished tuning cells.", "")]
    picked = {m: v["chosen"] for m, v in chosen.get("methods", {}).items()}
    lines = ["| method | point | learning (mean ± 95% half-width) | seeds | chosen |",
             "| --- | --- | ---: | ---: | :-: |"]
    for (method, *values), part in learning.groupby(["method", *keys], sort=False):
        mean, half, n = mean_ci(part["learning"].tolist())
        point = dict(zip(keys, values))
        mark = "**✓**" if picked.get(method) == point else ""
        shown = f"{mean:+.3f} ± {half:.3f}" if math.isfinite(half) else f"{mean:+.3f}"
        lines.append(f"| {method} | {_point_label(part.iloc[0], keys)} | {shown} | {n} | {mark} |")
    how = (f"Selection rule (fixed before the run): {rule.describe()}. Training prompts only; the held-out eval "
           "is not read." + ("" if chosen else " No chosen.json yet: the grid is not complete."))
    edges = edge_choices(learning, keys, picked)
    if edges:
        lines += ["", "**Chosen on the grid's edge** (the grid does not bracket the optimum; widen it before the "
                  "table is read as tuned): " + "; ".join(edges) + "."]
    return [Section(title, how, "\n".join(lines) + "\n")]


@FIGURES.register("tuning_curves")
def tuning_curves(ctx: Context) -> list[Section]:
    title = "Tuning curves: learning against the tuned value per method"
    learning, keys, rule, chosen = _learning(ctx)
    numeric = [k for k in keys if pd.api.types.is_numeric_dtype(learning[k])]
    if learning.empty or not numeric:
        return [Section(title, "Not available: no finished tuning cells over a numeric key.", "")]
    x = numeric[0]
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    cmap = plt.get_cmap("tab10")
    for i, (method, part) in enumerate(learning.groupby("method", sort=False)):
        rows = [(v, *mean_ci(p["learning"].tolist())) for v, p in part.groupby(x)]
        xs, means, halves = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
        colour = cmap(i % 10)
        ax.plot(xs, means, "-o", color=colour, label=method, lw=1.4, ms=3)
        lo = [m - h if math.isfinite(h) else m for m, h in zip(means, halves)]
        hi = [m + h if math.isfinite(h) else m for m, h in zip(means, halves)]
        ax.fill_between(xs, lo, hi, color=colour, alpha=0.15, lw=0)
        pick = chosen.get("methods", {}).get(method, {}).get("chosen", {})
        if x in pick:
            y = dict(zip(xs, means)).get(pick[x])
            if y is not None:
                ax.plot([pick[x]], [y], "*", color=colour, ms=13, mec="black", mew=0.6)
    ax.set_xscale("log")
    ax.set(xlabel=x, ylabel=f"training {rule.metric}: last {rule.window} updates − update 0")
    ax.axhline(0, color="grey", lw=0.6)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    folder = ctx.out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    save_figure(fig, folder / "tuning_curves.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    how = ("Mean over tuning seeds with its 95% band; the star is each method's chosen point "
           f"({rule.describe()}).")
    return [Section(title, how, "![tuning curves](figures/tuning_curves.png)\n")]
