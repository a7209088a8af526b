"""Tables: Table 2 (mean ± 95% CI over seeds, paired differences), Table 1, and win rates (Table 3,
per oracle dimension, seed-clustered bootstrap intervals).

Each table is written as markdown, LaTeX (booktabs) and CSV under ``<report>/tables/``.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.parts import TABLES, Context, Section
from grpo_bench.report.stats import cluster_bootstrap, interval_text, mean_ci

# Headline columns: (title, eval metric, +1 higher is better / -1 lower is better). Each is measured
# as *learning*: the held-out evaluation (ODE, fixed eval noise, held-out prompts) after the last
# update minus the same evaluation at update 0, per cell. At update 0 every method of a seed is the
# same base model, so with no learning every row reads 0: the columns measure training, not samplers.
TABLE2 = [
    ("Oracle", "eval_oracle_overall", 1), ("oVQ", "eval_oracle_vq", 1), ("oMQ", "eval_oracle_mq", 1),
    ("oTA", "eval_oracle_ta", 1), ("Correct", "eval_correct", 1), ("Manifold", "eval_manifold", -1),
    ("Diversity", "eval_diversity", 1), ("Judge", "eval_reward", 1),
]
# Diagnostics (never bold, never a headline): the training-rollout judge reward at the last update is
# an SDE sample on training prompts, so it differs between samplers before any training.
DIAGNOSTICS = [("Rollout reward", "reward", 1)]


def _fmt(mean: float, half: float, digits: int = 3, sign: bool = False) -> str:
    if not math.isfinite(mean):
        return "–"
    m = f"{mean:+.{digits}f}" if sign else f"{mean:.{digits}f}"
    return m if not math.isfinite(half) else f"{m} ± {half:.{digits}f}"


def markdown(headers: list[str], rows: list[list[str]], align: str = "") -> str:
    align = align or "l" * len(headers)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def latex(headers: list[str], rows: list[list[str]], align: str = "") -> str:
    def esc(s: str) -> str:
        s = s.replace("_", r"\_").replace("±", r"$\pm$").replace("≈", r"$\approx$")
        return s.replace("%", r"\%").replace("**", "")

    def cell(s: str) -> str:
        return rf"\textbf{{{esc(s[2:-2])}}}" if s.startswith("**") and s.endswith("**") else esc(s)

    align = align or "l" * len(headers)
    lines = [rf"\begin{{tabular}}{{{align}}}", r"\toprule", " & ".join(map(esc, headers)) + r" \\", r"\midrule"]
    lines += [" & ".join(map(cell, r)) + r" \\" for r in rows]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}", ""])


def write_table(out: Path, name: str, headers: list[str], rows: list[list[str]], csv: pd.DataFrame,
                align: str = "") -> str:
    """Write name.md / name.tex / name.csv; return the markdown."""
    folder = out / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    md = markdown(headers, rows, align)
    (folder / f"{name}.md").write_text(md)
    (folder / f"{name}.tex").write_text(latex(headers, rows, align))
    csv.to_csv(folder / f"{name}.csv", index=False)
    return md


def table2_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Long frame: setting, group, column, metric, mean, ci (half-width), n — over seeds.

    Headline columns (TABLE2) from the learning view, diagnostics from the final rows.
    """
    finals = data.finals(df)
    sources = [(data.learning(df), TABLE2), (finals, DIAGNOSTICS)]
    order = data.group_order(df)
    metrics = set(df.loc[df["kind"] == "final", "metric"])
    keys = [k for k in data.varied_keys(df) if k in finals and k not in metrics]  # each row's grid values
    grid = {(s, g): {k: part[k].iloc[0] for k in keys} for (s, g), part in finals.groupby(["setting", "group"])}
    out = []
    settings = sorted(set().union(*(set(f["setting"]) for f, _ in sources if not f.empty)))
    for setting in settings:
        for group in order:
            label = grid.get((setting, group), {})
            for frame, columns in sources:
                rows = frame[(frame["setting"] == setting) & (frame["group"] == group)] if not frame.empty else frame
                if rows.empty:
                    continue
                for title, metric, _ in columns:
                    m, h, n = mean_ci(rows[metric].tolist() if metric in rows else [])
                    out.append({"setting": setting, "group": group, **label, "column": title, "metric": metric,
                                "mean": m, "ci": h, "n": n})
    return pd.DataFrame(out, columns=["setting", "group", *keys, "column", "metric", "mean", "ci", "n"])


@TABLES.register("table2")
def table2(ctx: Context) -> list[Section]:
    st = table2_stats(ctx.df)
    every = TABLE2 + DIAGNOSTICS
    cols = [t for t, _, _ in every if st.loc[st["column"] == t, "n"].sum() > 0]
    headline = {t for t, _, _ in TABLE2}
    best: dict[tuple[str, str], float] = {}
    for (setting, title), part in st.groupby(["setting", "column"]):
        sign = next(d for t, _, d in every if t == title)
        if title in headline and part["mean"].notna().any():
            best[(setting, title)] = (part["mean"] * sign).max()
    rows = []
    for (setting, group), part in st.groupby(["setting", "group"], sort=False):
        cells = [setting, group, str(int(part["n"].max()))]
        for title in cols:
            found = part[part["column"] == title]
            if found.empty:
                cells.append("–")
                continue
            r = found.iloc[0]
            sign = next(d for t, _, d in every if t == title)
            text = _fmt(r["mean"], r["ci"], sign=title in headline)
            is_best = math.isfinite(r["mean"]) and np.isclose(r["mean"] * sign, best.get((setting, title), np.nan))
            cells.append(f"**{text}**" if is_best and len(st["group"].unique()) > 1 else text)
        rows.append(cells)
    wide = st.pivot_table(index=["setting", "group"], columns="column", values=["mean", "ci", "n"], sort=False)
    wide.columns = [f"{col}_{stat}" for stat, col in wide.columns]
    keys = [c for c in st.columns if c in data.varied_keys(ctx.df)]
    if keys:  # the CSV names each row's grid values in columns, not only inside the row label
        values = st.drop_duplicates(["setting", "group"]).set_index(["setting", "group"])[keys]
        wide = values.join(wide, how="right")
    md = write_table(ctx.out, "table2", ["Setting", "Method", "seeds", *cols], rows, wide.reset_index(),
                     "llr" + "r" * len(cols))
    sections = [Section(
        "Table 2 — learning on held-out prompts (change from update 0)",
        "Mean ± 95% t-interval over seeds of each cell's held-out evaluation (ODE, fixed noise) after the last "
        "update minus the same at update 0: o* = the exact oracle (Manifold: lower is better), Judge = the learned "
        "training reward on the same videos (– on the world_oracle track, which trains on the oracle itself). "
        "Bold = best in its family. Rollout reward = the judge on the last "
        "update's training rollouts: a diagnostic of the sampler, never a headline.",
        md)]
    sections += _paired(ctx)
    return sections


def _baseline_group(fin: pd.DataFrame, cells: pd.DataFrame, setting: str, baseline: dict) -> list[str]:
    chosen = cells[(cells["setting"] == setting) & cells["config"].map(
        lambda c: all(c.get(k) == v for k, v in baseline.items()))]
    return list(dict.fromkeys(chosen["group"]))


def _paired(ctx: Context) -> list[Section]:
    from grpo_bench.report.power import equivalent, holm, min_effect_of, min_effects, paired_p

    baseline = ctx.spec.get("baseline") or {}
    if not baseline:
        return []
    gain, cells = data.learning(ctx.df), data.cells(ctx.df)
    if gain.empty:
        return [Section("Paired differences", "Not available: no evaluation at update 0 and after training.", "")]
    rows, csv, notes = [], [], []
    effects = min_effects(ctx.spec.get("min_effect"))
    metrics = [(t, m) for t, m, _ in TABLE2 if m in gain]
    for setting in sorted(gain["setting"].unique()):
        groups = _baseline_group(gain, cells, setting, baseline)
        if len(groups) != 1:
            notes.append(f"setting {setting}: baseline {baseline} matches {len(groups)} rows ({groups}); skipped")
            continue
        base = gain[(gain["setting"] == setting) & (gain["group"] == groups[0])].set_index("seed")
        family = []
        for group in [g for g in data.group_order(ctx.df) if g != groups[0]]:
            other = gain[(gain["setting"] == setting) & (gain["group"] == group)].set_index("seed")
            if other.empty:
                continue
            seeds = sorted(set(base.index) & set(other.index))
            for title, metric in metrics:
                d = (other.loc[seeds, metric] - base.loc[seeds, metric]).tolist()
                m, h, n = mean_ci(d)
                margin = min_effect_of(effects, title)
                family.append({"setting": setting, "group": group, "baseline": groups[0], "column": title,
                               "diff_mean": m, "diff_ci": h, "n": n, "p": paired_p(d), "min_effect": margin,
                               "equivalent": equivalent(d, margin)})
        for r, p in zip(family, holm([r["p"] for r in family])):
            r["p_holm"] = p
        for group in dict.fromkeys(r["group"] for r in family):
            mine = [r for r in family if r["group"] == group]
            row = [setting, f"{group} − {groups[0]}", str(max(r["n"] for r in mine))]
            for r in mine:  # * decided, else ≈ equivalent: the power table's verdict
                decided = math.isfinite(r["p_holm"]) and r["p_holm"] < 0.05
                mark = "*" if decided else ("≈" if r["equivalent"] else "")
                row.append(_fmt(r["diff_mean"], r["diff_ci"], sign=True) + mark)
            rows.append(row)
        csv += family
    if not rows:
        return [Section("Paired differences", "Not available.", "\n".join(f"- {n}" for n in notes) + "\n")]
    md = write_table(ctx.out, "table2_paired", ["Setting", "Difference", "seeds", *[t for t, _ in metrics]], rows,
                     pd.DataFrame(csv), "llr" + "r" * len(metrics))
    md += "".join(f"\n- {n}" for n in notes)
    return [Section(
        f"Table 2b — learning against the baseline ({', '.join(f'{k}={v}' for k, v in baseline.items())})",
        "Per seed (same prompts, noise and compute) the row's learning minus the baseline's, then mean ± 95% "
        "t-interval over seeds; * = paired t-test significant after Holm correction over the setting's family "
        "(every row × column); ≈ = equivalent by TOST at 5% (the 90% t-interval lies inside ± the report's "
        "min effect). The power table says how many seeds would decide the rest.",
        md)]


WINRATE_DIMS = [("Overall", "oracle_overall"), ("oVQ", "oracle_vq"), ("oMQ", "oracle_mq"), ("oTA", "oracle_ta")]


@TABLES.register("winrates")
def winrates(ctx: Context) -> list[Section]:
    vids = data.videos(ctx.df)
    if vids.empty or "oracle_overall" not in vids:
        return [Section("Table 3 — pairwise win rates", "Not available: no per-video oracle rows.", _study_links(ctx))]
    key = ["seed", "prompt", "sample", "video_seed"]
    rows, csv = [], []
    order = data.group_order(ctx.df)
    for setting in sorted(vids["setting"].unique()):
        part = vids[vids["setting"] == setting]
        # later rows first: A = the proposed method (listed last in suites) against earlier baselines
        groups = [g for g in reversed(order) if g in set(part["group"])]
        videos = {g: rows_of.set_index(key) for g, rows_of in part.groupby("group", sort=False, observed=True)}
        for a, b in itertools.combinations(groups, 2):
            joined = videos[a].join(videos[b], how="inner", lsuffix="_a", rsuffix="_b").reset_index()
            cells = [setting, a, b, str(len(joined)), str(joined["seed"].nunique())]
            for title, col in WINRATE_DIMS:
                both = joined[[f"{col}_a", f"{col}_b", "seed"]].dropna()
                outcome = np.where(both[f"{col}_a"] > both[f"{col}_b"], 1.0,
                                   np.where(both[f"{col}_a"] == both[f"{col}_b"], 0.5, 0.0))
                # videos of one seed share a trained policy: resample seeds, not videos
                rate, lo, hi = cluster_bootstrap(outcome, [both["seed"]])
                seeds = int(both["seed"].nunique())
                cells.append(f"{_fmt(rate, math.nan)} {interval_text(lo, hi, seeds)}" if len(both) else "–")
                csv.append({"setting": setting, "a": a, "b": b, "dimension": title, "pairs": len(both),
                            "seeds": int(both["seed"].nunique()), "wins": int((outcome == 1).sum()),
                            "ties": int((outcome == 0.5).sum()), "win_rate": rate, "ci_low": lo, "ci_high": hi})
            rows.append(cells)
    if not rows:
        only = ", ".join(sorted(set(vids["group"].astype(str))))
        return [Section("Table 3 — pairwise win rates", f"Not available: every setting has one row ({only}); a win "
                        "rate pairs two rows' videos (compare two runs, or run a suite).", _study_links(ctx))]
    md = write_table(ctx.out, "winrates", ["Setting", "A", "B", "pairs", "seeds", *[t for t, _ in WINRATE_DIMS]], rows,
                     pd.DataFrame(csv), "lllrr" + "r" * len(WINRATE_DIMS))
    return [Section(
        "Table 3 — pairwise win rates judged by the oracle",
        "Share of eval videos (paired by seed, prompt and initial noise) where A's oracle score beats B's, per "
        "dimension (ties count half), with a 95% bootstrap interval that resamples seeds; above 0.5 = A better.",
        md + _study_links(ctx))]


def _study_links(ctx: Context) -> str:
    """Links to human-study analyses of kits exported from this run (grpo-bench study analyze)."""
    import json
    import os

    path = ctx.out.parent / "studies.json"  # the run folder; written by grpo-bench study export
    kits = json.loads(path.read_text()) if path.is_file() else []
    found = [Path(k) / "analysis" / "table3.md" for k in kits if (Path(k) / "analysis" / "table3.md").is_file()]
    return "".join(f"\n- Human preference study: [{t.parent.parent.name}/analysis/table3.md]"
                   f"({os.path.relpath(t, ctx.out)})\n" for t in found)


MATCHED_LEVEL = 0.5
"""Noise level of Table 1's matched blocks (SAGE-GRPO's default eta; inside CPS's [0, 1])."""


@TABLES.register("table1")
def table1(ctx: Context) -> list[Section]:
    from grpo_bench.report.samplers import table1_frame

    shift, data_std = 3.0, 0.5
    blocks = [(10, MATCHED_LEVEL), (50, MATCHED_LEVEL), (10, None)]  # matched levels first, then the defaults
    frames, mds = [], []
    for steps, level in blocks:
        frame = table1_frame(steps=steps, shift=shift, data_std=data_std, noise_level=level)
        frame.insert(0, "levels", "default" if level is None else f"matched {level:g}")
        frame.insert(0, "T", steps)
        frames.append(frame)
        headers = [str(c) for c in frame.columns]
        rows = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in r] for r in frame.itertuples(index=False)]
        name = f"table1_T{steps}_{'default' if level is None else 'matched'}"
        which = "each method at its default level" if level is None else f"every kernel at noise level {level:g}"
        mds.append(f"**T = {steps}, {which}**"
                   "\n\n" + write_table(ctx.out, name, headers, rows, frame, "rll" + "r" * (len(headers) - 3)))
    whole = pd.concat(frames, ignore_index=True)
    whole.to_csv(ctx.out / "tables" / "table1.csv", index=False)
    return [Section(
        f"Table 1 — noise injected per kernel (exact Gaussian model, shift = {shift:g}, s = {data_std:g})",
        "Matched blocks put every kernel at the same noise level (eta or a), at T = 10 and T = 50; the last block uses "
        "each method's default level, which is what its runs use. noise_energy = summed per-step variance; var_err = "
        "relative error of the marginal variance against the closed form V(sigma) (0 = exact); excess = that error "
        "minus the ODE's own discretisation error, i.e. what the injected noise adds.",
        "\n".join(mds))]


@TABLES.register("cells")
def cells_table(ctx: Context) -> list[Section]:
    cells = data.cells(ctx.df)
    rows = [[r.cell, r.setting, r.group, str(r.seed), r.status, f"{r.wall_time:.1f}", r.error]
            for r in cells.itertuples()]
    md = write_table(ctx.out, "cells", ["cell", "Setting", "Method", "seed", "status", "seconds", "error"], rows,
                     cells.drop(columns=["config"]), "lllrlrl")
    return [Section("Cells", "Every cell of the suite: its id (run folder), status, wall time and error if any.", md)]
