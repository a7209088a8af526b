"""Ranks of the rows at held-out oracle learning: the table and figure that stay readable at ten methods.

Within each seed of a family (a ``setting`` label: with strata, one reward track and one reading), the rows
are ranked by their held-out oracle learning (the eval at the end minus the same cell's eval at update 0,
Table 2's Oracle column), 1 = learned most, ties sharing the mean of their ranks. Ranking is within a seed,
so it is paired by seed: a seed on which every row did well or badly moves no rank. Only seeds on which every
row of the family has a learning value are ranked (a rank among fewer rows is not comparable); the section
names the seeds left out. Each row's mean rank over those seeds gets a 95% percentile bootstrap interval
that resamples whole seeds (``stats.cluster_bootstrap``, 2000 draws, fixed seed): with 3 seeds it can only
show the seeds' spread (a row ranked alike on every seed gets a zero-width interval), and it is n/a with one.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from grpo_bench.report import data
from grpo_bench.report.parts import FIGURES, TABLES, Context, Section
from grpo_bench.report.stats import cluster_bootstrap, interval_text

ORACLE = "eval_oracle_overall"
HOW_INTERVAL = ("95% percentile bootstrap over seeds (whole seeds resampled, 2000 draws): with few seeds it "
                "shows their spread, not a guarantee; n/a with one seed")


def learning_by_seed(df: pd.DataFrame) -> pd.DataFrame:
    """One row per finished cell: setting, group, seed and its held-out oracle learning."""
    learned = data.learning(df)
    if learned.empty or ORACLE not in learned:
        return pd.DataFrame(columns=["setting", "group", "seed", "learning"])
    out = learned[["setting", "group", "seed", ORACLE]].rename(columns={ORACLE: "learning"})
    return out[np.isfinite(out["learning"].astype(float))].reset_index(drop=True)


def seed_ranks(learned: pd.DataFrame, order: list[str] | None = None) -> tuple[pd.DataFrame, dict[str, list]]:
    """(ranks, left out): one row per (setting, group, seed) of the seeds complete in their family, with
    ``rank`` (1 = most learning, ties averaged) and ``rows`` (how many were ranked); and per family the
    seeds left out because some row has no learning there."""
    out, left_out = [], {}
    for setting, family in learned.groupby("setting"):  # families in Table 2's order (sorted labels)
        table = family.pivot_table(index="seed", columns="group", values="learning", aggfunc="first")
        if order is not None:  # the suite's row order: ties and the figure read in it
            table = table[[g for g in order if g in table.columns]]
        complete = table.dropna()
        left_out[setting] = sorted(int(s) for s in table.index.difference(complete.index))
        for seed, values in complete.iterrows():
            ranks = rankdata(-values.to_numpy(float), method="average")
            out += [{"setting": setting, "group": g, "seed": int(seed), "rank": float(r), "rows": len(values),
                     "learning": float(v)} for g, r, v in zip(values.index, ranks, values)]
    columns = ["setting", "group", "seed", "rank", "rows", "learning"]
    return pd.DataFrame(out, columns=columns), left_out


def rank_summary(ranks: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, group): mean rank, its bootstrap interval over seeds, seeds, rows, the seeds it ranked
    first on and its mean learning; each family's rows sorted best first (mean rank, then suite order)."""
    out = []
    for (setting, group), part in ranks.groupby(["setting", "group"], sort=False):
        mean, low, high = cluster_bootstrap(part["rank"].tolist(), [part["seed"].tolist()])
        out.append({"setting": setting, "group": group, "mean_rank": mean, "low": low, "high": high,
                    "seeds": len(part), "rows": int(part["rows"].iloc[0]), "first": int((part["rank"] == 1).sum()),
                    "learning_mean": float(part["learning"].mean())})
    frame = pd.DataFrame(out, columns=["setting", "group", "mean_rank", "low", "high", "seeds", "rows", "first",
                                       "learning_mean"])
    families = {s: i for i, s in enumerate(dict.fromkeys(frame["setting"]))}  # as seed_ranks ordered them
    key = pd.DataFrame({"family": frame["setting"].map(families), "rank": frame["mean_rank"],
                        "position": range(len(frame))})  # equal mean ranks: the suite's row order
    return frame.loc[key.sort_values(["family", "rank", "position"]).index].reset_index(drop=True)


def _ranked(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, list]]:
    ranks, left_out = seed_ranks(learning_by_seed(df), data.group_order(df))
    ranks = ranks[ranks["rows"] > 1]  # a family of one row has nothing to rank
    return ranks, rank_summary(ranks), left_out


def _left_out_note(left_out: dict[str, list], ranked: set[str]) -> str:
    lines = [f"- {s}: seed(s) {', '.join(map(str, seeds))} left out (a row has no learning there)"
             for s, seeds in left_out.items() if seeds and s in ranked]
    return "\n" + "\n".join(lines) + "\n" if lines else ""


NOT_AVAILABLE = "Not available: no family with two or more rows evaluated at update 0 and after training on a " \
                "common seed."


@TABLES.register("oracle_ranks")
def oracle_ranks_table(ctx: Context) -> list[Section]:
    from grpo_bench.report.tables import write_table

    title = "Ranks at held-out oracle learning"
    ranks, summary, left_out = _ranked(ctx.df)
    if summary.empty:
        return [Section(title, NOT_AVAILABLE, "")]
    rows = [[r.setting, r.group, f"{r.mean_rank:.2f}", interval_text(r.low, r.high, r.seeds, digits=2),
             f"{r.seeds}", f"{r.first} of {r.seeds}", f"{r.learning_mean:+.3f}", f"{r.rows}"]
            for r in summary.itertuples()]
    headers = ["Setting", "Row", "mean rank", "95% interval", "seeds", "ranked first", "Oracle learning (mean)",
               "rows ranked"]
    md = write_table(ctx.out, "oracle_ranks", headers, rows, summary, "llrlrrrr")
    return [Section(title, "Per seed, the rows of a family ranked by held-out oracle learning (eval at the end minus "
                    "the same seed's eval at update 0; 1 = learned most, ties share their mean rank), so ranks are "
                    f"paired by seed; mean rank over the seeds on which every row has a value, {HOW_INTERVAL}. "
                    "Rows best first; the learning column is Table 2's Oracle mean over the same seeds.",
                    md + _left_out_note(left_out, set(summary["setting"])))]


@FIGURES.register("oracle_ranks")
def oracle_ranks_figure(ctx: Context) -> list[Section]:
    import matplotlib.pyplot as plt

    from grpo_bench.report.figures import _colours, _save

    title = "Ranks at held-out oracle learning (figure)"
    ranks, summary, left_out = _ranked(ctx.df)
    if summary.empty:
        return [Section(title, NOT_AVAILABLE, "")]
    settings = list(dict.fromkeys(summary["setting"]))
    colour = _colours(data.group_order(ctx.df))
    tallest = int(summary.groupby("setting").size().max())
    ncols = min(2, len(settings))
    nrows = math.ceil(len(settings) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, (0.34 * tallest + 1.3) * nrows), squeeze=False)
    for ax, setting in zip(axes.flat, settings):
        _rank_panel(ax, setting, summary[summary["setting"] == setting], ranks[ranks["setting"] == setting], colour)
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    fig.tight_layout()
    how = ("One panel per family, rows best first: the dot is a row's mean rank (1 = learned most held-out oracle, "
           f"ranked within each seed), the bar its {HOW_INTERVAL}; grey dots under it are the row's rank on each "
           "seed (one height per seed). Bars that overlap do not separate their rows.")
    return [Section(title, how,
                    _save(ctx, fig, "oracle_ranks") + _left_out_note(left_out, set(settings)))]


def _rank_panel(ax, setting: str, summary: pd.DataFrame, ranks: pd.DataFrame, colour: dict) -> None:
    import textwrap

    n_rows = int(summary["rows"].iloc[0])
    y = {g: i for i, g in enumerate(summary["group"])}  # best at the top (the axis is inverted below)
    seeds = sorted(ranks["seed"].unique())
    # each seed at its own small height below the row, so seeds of equal rank do not hide each other
    offset = {s: 0.12 + i * min(0.3 / max(len(seeds), 1), 0.08) for i, s in enumerate(seeds)}
    ax.scatter(ranks["rank"], [y[g] + offset[s] for g, s in zip(ranks["group"], ranks["seed"])], marker="o", s=6,
               color="0.55", lw=0, zorder=1)
    for r in summary.itertuples():
        c = colour.get(r.group, "k")
        if math.isfinite(r.low) and math.isfinite(r.high):
            ax.plot([r.low, r.high], [y[r.group]] * 2, color=c, lw=2.2, solid_capstyle="butt", zorder=2)
        ax.plot([r.mean_rank], [y[r.group]], "o", color=c, ms=6, mec="k", mew=0.6, zorder=3)
    ax.set_yticks(list(y.values()), [textwrap.shorten(g, 44) for g in y], fontsize=7)
    ax.set_ylim(len(y) - 0.5, -0.5)
    ax.set_xlim(0.6, n_rows + 0.4)
    ax.set_xticks(range(1, n_rows + 1))
    ax.set_xlabel(f"rank among {n_rows} rows (1 = most held-out oracle learning)", fontsize=8)
    ax.set_title(textwrap.fill(f"Setting {setting} ({int(summary['seeds'].max())} seeds)", 60), fontsize=9)
    ax.grid(axis="x", alpha=0.3)
