"""Factor effects of a factorial suite (suite/design.py): main effects and the two-factor interactions the design
estimates, each with a 95% interval over seeds; table ``factor_effects`` and figure ``factor_effects``; and the
model's prediction for every point of the full factorial, table ``factor_predictions``.

Two readings of each cell's learning, each fitted by the same model: at equal updates (the end of training,
Table 2's headline) and at equal training compute (report/equal_compute.py: where the cheapest design row ends, the
branching step rule, which trains one step a sample where the others train three; measured at an eval point the
suite places there, else interpolated between two, and the table says which).

The model is the suite's own: the intercept plus every effect its ``design.estimates`` claims, in effect
(sum-to-zero) coding, fitted by least squares to every finished cell's learning (the held-out oracle gain, Table
2's headline) with the seed as the cluster: V = (X'X)^-1 (sum_s X_s' u_s u_s' X_s) (X'X)^-1 * G / (G - 1), a t
interval on G - 1 degrees of freedom. When every seed holds every point this is exactly the t interval over seeds
of each seed's own fit (tests/suite/test_factors.py checks it). A level's main effect is its deviation from the grand
mean; an interaction cell's the deviation of that pair beyond both main effects.
"""

from __future__ import annotations

import json
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never open a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from grpo_bench.report import data  # noqa: E402
from grpo_bench.report.parts import FIGURES, TABLES, Context, Section  # noqa: E402
from grpo_bench.report.power_table import boundary_text, sequential_verdicts  # noqa: E402
from grpo_bench.report.stats import LEVEL  # noqa: E402
from grpo_bench.report.tables import write_table  # noqa: E402
from grpo_bench.suite.design import effect_columns, in_point_order, model_matrix  # noqa: E402
from grpo_bench.suite.machine import hardware  # noqa: E402

RESPONSE = "eval_oracle_overall"
"""Table 2's headline: the held-out oracle score after the last update minus at update 0."""
COLUMNS = ["effect", "level", "estimate", "low", "high", "seeds"]


def stored_design(ctx: Context) -> dict[str, Any]:
    """The report's design ({} for none), its factors in its own order (a stored spec's keys come back sorted)."""
    return in_point_order(ctx.spec.get("design") or {})


def row_name(effect: str, level: str) -> str:
    """A level's name in a ``run --until-decided`` record: ``kernel: sage`` (report/factor_looks.py)."""
    return f"{effect}: {level}"


def _code(levels: list[str], level: str) -> np.ndarray:
    return effect_columns(levels, [level])[0]


def _fit(frame: pd.DataFrame, factors: dict[str, list[str]], effects: list[str], response: str,
         level: float) -> tuple[np.ndarray, np.ndarray, float, int]:
    """(coefficients, their seed-clustered covariance, the t quantile on G - 1 df, G seeds) of the design's model."""
    rows = frame[list(factors)].astype(str).to_dict("records")
    x, y = model_matrix(factors, rows, effects), frame[response].to_numpy(float)
    bread = np.linalg.pinv(x.T @ x)
    beta = bread @ x.T @ y
    resid = y - x @ beta
    seeds = frame["seed"].to_numpy()
    groups = list(dict.fromkeys(seeds.tolist()))
    meat = sum(np.outer(x[seeds == s].T @ resid[seeds == s], x[seeds == s].T @ resid[seeds == s]) for s in groups)
    g = len(groups)
    cov = bread @ meat @ bread * (g / (g - 1)) if g > 1 else np.full_like(bread, np.nan)
    t = float(stats.t.ppf((1 + level) / 2, g - 1)) if g > 1 else float("nan")
    return beta, cov, t, g


def fit_effects(frame: pd.DataFrame, factors: dict[str, list[str]], effects: list[str],
                response: str = "y", level: float = LEVEL) -> pd.DataFrame:
    """One row per main-effect level and per interaction cell: estimate and interval (seed-clustered OLS).

    ``frame`` holds one row per cell: a column per factor (its level), ``seed`` and ``response``."""
    frame = frame.dropna(subset=[response])
    beta, cov, t, g = _fit(frame, factors, effects, response, level)
    out, start = [], 1
    for effect in effects:
        names = effect.split(":")
        width = int(np.prod([len(factors[f]) - 1 for f in names]))
        for combo in _combos([factors[f] for f in names]):
            c = np.zeros(len(beta))
            code = _code(factors[names[0]], combo[0])
            for f, lv in zip(names[1:], combo[1:]):
                code = np.kron(code, _code(factors[f], lv))
            c[start : start + width] = code
            est, half = float(c @ beta), float(t * np.sqrt(max(c @ cov @ c, 0.0)))
            out.append({"effect": effect, "level": " × ".join(combo), "estimate": est, "low": est - half,
                        "high": est + half, "seeds": g})
        start += width
    return pd.DataFrame(out, columns=COLUMNS)


def predict_points(frame: pd.DataFrame, factors: dict[str, list[str]], effects: list[str],
                   response: str = "y", level: float = LEVEL) -> pd.DataFrame:
    """Every point of the full factorial, best first: the model's predicted learning with its seed-clustered
    interval, and whether the design ran it. The model holds the claimed effects only, so a point the design did
    not run is predicted as if every unestimated interaction were zero (issue #46 item 4 picks its best here)."""
    frame = frame.dropna(subset=[response])
    beta, cov, t, g = _fit(frame, factors, effects, response, level)
    points = _combos(list(factors.values()))
    x = model_matrix(factors, [dict(zip(factors, p)) for p in points], effects)
    ran = set(map(tuple, frame[list(factors)].astype(str).to_numpy().tolist()))
    est = x @ beta
    half = t * np.sqrt(np.clip(np.einsum("np,pq,nq->n", x, cov, x), 0.0, None))
    out = pd.DataFrame([dict(zip(factors, p)) for p in points])
    out = out.assign(estimate=est, low=est - half, high=est + half, ran=[p in ran for p in points], seeds=g)
    return out.sort_values("estimate", ascending=False, kind="stable").reset_index(drop=True)


def _combos(levels: list[list[str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [()]
    for lv in levels:
        out = [(*o, v) for o in out for v in lv]
    return out


def design_frame(df: pd.DataFrame, design: dict[str, Any], response: str = RESPONSE) -> pd.DataFrame:
    """One row per finished cell of the design: its level of each factor (read from the cell's grid labels),
    seed, response ``y`` (at equal updates) and ``y_compute`` (the same learning at the design's matched training
    compute, NaN where a cell has no compute counters); cells outside the design (another method, a baseline row)
    are left out."""
    learned = data.learning(df)
    if learned.empty or response not in learned:
        return pd.DataFrame()
    at_compute = _matched_learning(df, design)
    labels = {r.cell: json.loads(r.text).get("labels", {}) for r in df[df["kind"] == "cell"].itertuples()
              if isinstance(r.text, str)}
    out = []
    for r in learned.itertuples():
        lab = labels.get(r.cell, {})
        if lab.get("method") != design["method"]:
            continue
        point = {f: next((lv for lv, values in levels.items() if all(lab.get(k) == v for k, v in values.items())),
                         None) for f, levels in design["factors"].items()}
        if None not in point.values():
            out.append({**point, "seed": r.seed, "cell": r.cell, "y": getattr(r, response),
                        "y_compute": at_compute.get(r.cell, float("nan"))})
    return pd.DataFrame(out)


def _matched_learning(df: pd.DataFrame, design: dict[str, Any]) -> dict[str, float]:
    """cell -> its learning at the matched compute of the design's own cells (equal_compute.matched over them)."""
    from grpo_bench.report.equal_compute import matched

    cells = data.cells(df)
    mine = set(cells.loc[cells["method"] == design["method"], "cell"])
    mt = matched(df[df["cell"].isin(mine) | (df["kind"] == "suite")])
    return {} if mt.empty else dict(zip(mt["cell"], mt["learning_matched"]))


READINGS = {"y": "equal updates", "y_compute": "equal compute"}
"""design_frame's responses and the reading each is."""


def _effects(ctx: Context) -> pd.DataFrame | None:
    """Both readings' effects, one frame with a ``reading`` column; None before two seeds of design cells."""
    design = stored_design(ctx)
    if not design:
        return None
    frame = design_frame(ctx.df, design)
    if frame.empty or frame["seed"].nunique() < 2:
        return None
    factors = {f: list(levels) for f, levels in design["factors"].items()}
    out = []
    for column, reading in READINGS.items():
        part = frame.dropna(subset=[column]) if column in frame else frame.iloc[:0]
        if part["seed"].nunique() >= 2:
            out.append(fit_effects(part, factors, design["estimates"], column).assign(reading=reading))
    return pd.concat(out, ignore_index=True)


@TABLES.register("factor_effects")
def factor_effects_table(ctx: Context) -> list[Section]:
    design = stored_design(ctx)
    effects = _effects(ctx)
    title = "Factor effects"
    if effects is None:
        return [Section(title, "Needs a suite with a design block and finished cells on two seeds or more.",
                        "_No factorial results yet._")]
    readings = list(dict.fromkeys(effects["reading"]))
    first = effects[effects["reading"] == readings[0]]
    record = data.suite_info(ctx.df).get("decide")
    sequential = {row: verdict for (_, row, _), verdict in sequential_verdicts(record).items()}
    rows = []
    for i, r in enumerate(first.itertuples()):
        row = [r.effect, r.level]
        for reading in readings:
            e = effects[effects["reading"] == reading].iloc[i]
            row += [f"{e.estimate:+.4f}", f"[{e.low:+.4f}, {e.high:+.4f}]"]
        rows.append(row + ([sequential.get(row_name(r.effect, r.level), "–")] if sequential else []))
    headers = ["Effect", "Level", *[h for reading in readings for h in (reading.capitalize(), "95% CI")],
               *(["sequential"] if sequential else [])]
    md = write_table(ctx.out, "factor_effects", headers, rows, effects)
    aliased = ", ".join(design.get("not_estimated", [])) or "none"
    how = (f"Least squares over the design's cells (effect coding; oracle gain from update 0) with the seed as the "
           f"cluster, t interval over {int(first['seeds'].iloc[0])} seeds; a level's deviation from the grand mean. "
           "Equal updates: each cell's learning at its last update (Table 2's). Equal compute: the same learning "
           "read at the training compute where the design's cheapest row ends (the equal-compute table's matched "
           "compute; that table says which rows were measured there and which interpolated). "
           f"Not estimated by this design: {aliased}.")
    if len(readings) < len(READINGS):
        how += " Equal compute: not available (cells without compute counters, or fewer than two seeds)."
    if sequential:  # `run --until-decided` decided the main effects at equal updates (report/factor_looks.py)
        how += (" Sequential: the main effects at equal updates, each seed's own fit of the model as its paired "
                "difference, one Holm family. " + boundary_text(record))
    return [Section(title, how, md)]


SIGNATURE = ("reward", "policy_loss", "kl")
"""Per-update training metrics that together identify a run's training: two cells whose values agree to the last
bit at every update trained identically."""


def inert_contrasts(df: pd.DataFrame, design: dict[str, Any]) -> pd.DataFrame:
    """Per factor and pair of its levels: how many pairs of design cells differ in that factor alone (same other
    levels, seed, lr, precision and machine) and how many of them trained identically (``SIGNATURE``): a contrast
    whose levels never acted differently, such as a clip that never clips against a mask that never masks."""
    frame = design_frame(df, design)
    columns = ["factor", "levels", "pairs", "identical"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    rows = df[(df["kind"] == "update") & df["metric"].isin(SIGNATURE)]
    signature = {cell: tuple(map(tuple, part.sort_values(["update", "metric"])[["update", "metric", "value"]]
                                 .astype(str).to_numpy()))
                 for cell, part in rows.groupby("cell", sort=False)}
    infos = data.cell_infos(df)
    lr = {cell: info.get("config", {}).get("lr") for cell, info in infos.items()}
    # Bit-identity is a property of one arithmetic: a tuning grid may mix machines and precisions, and a pair
    # across them differs in its last bits whatever its levels do, so it is no pair.
    arithmetic = {cell: f"{info.get('precision')} on {hardware(info.get('machine', ''))}"
                  for cell, info in infos.items()}
    frame = frame.assign(lr=frame["cell"].map(lr), arithmetic=frame["cell"].map(arithmetic))
    out = []
    for factor in design["factors"]:
        others = [f for f in design["factors"] if f != factor] + ["seed", "lr", "arithmetic"]
        counts: dict[tuple[str, str], list[int]] = {}
        for _, part in frame.groupby(others, sort=False, dropna=False):
            cells = list(part[[factor, "cell"]].itertuples(index=False))
            for i, (a, ca) in enumerate(cells):
                for b, cb in cells[i + 1:]:
                    key = tuple(sorted((a, b), key=list(design["factors"][factor]).index))
                    same = ca in signature and signature.get(ca) == signature.get(cb)
                    counts.setdefault(key, [0, 0])[0] += 1
                    counts[key][1] += int(same)
        out += [{"factor": factor, "levels": " vs ".join(k), "pairs": n, "identical": same}
                for k, (n, same) in counts.items()]
    return pd.DataFrame(out, columns=columns)


@TABLES.register("factor_liveness")
def factor_liveness_table(ctx: Context) -> list[Section]:
    design = stored_design(ctx)
    title = "Factor contrasts the logs show inert"
    table = inert_contrasts(ctx.df, design) if design else pd.DataFrame()
    if table.empty:
        return [Section(title, "Needs a suite with a design block and two finished cells that differ in one factor.",
                        "_No pairs yet._")]
    rows = [[r.factor, r.levels, str(r.pairs), f"{r.identical} ({r.identical / r.pairs:.0%})"]
            for r in table.itertuples()]
    md = write_table(ctx.out, "factor_liveness", ["Factor", "Levels", "Pairs", "Trained identically"], rows, table)
    how = ("Pairs of the design's cells that differ in one factor only (same other levels, seed and lr, run at the "
           "same precision on the same machine: bit-identity is a property of one arithmetic). Two cells "
           f"whose per-update {', '.join(SIGNATURE)} agree to the last bit trained identically: there the two "
           "levels never acted differently (a clip that never clipped, a KL mask that never masked), so an effect "
           "between them is zero by the recipe's step sizes, not evidence that the mechanisms are equivalent.")
    return [Section(title, how, md)]


@TABLES.register("factor_predictions")
def factor_predictions_table(ctx: Context, top: int = 8) -> list[Section]:
    design = stored_design(ctx)
    title = "Predicted best combinations"
    frame = design_frame(ctx.df, design) if design else pd.DataFrame()
    if frame.empty or frame["seed"].nunique() < 2:
        return [Section(title, "Needs a suite with a design block and finished cells on two seeds or more.",
                        "_No factorial results yet._")]
    factors = {f: list(levels) for f, levels in design["factors"].items()}
    pred = predict_points(frame, factors, design["estimates"], "y")
    shown = pred.head(top)
    rows = [[*(getattr(r, f) for f in factors), f"{r.estimate:+.4f}", f"[{r.low:+.4f}, {r.high:+.4f}]",
             "yes" if r.ran else "no"] for r in shown.itertuples()]
    md = write_table(ctx.out, "factor_predictions", [*factors, "Predicted", "95% CI", "Run"], rows, pred)
    aliased = ", ".join(design.get("not_estimated", [])) or "none"
    how = (f"The factor model's prediction for every point of the full {len(pred)}-point factorial (the {top} best "
           f"shown; all in tables/factor_predictions.csv), seed-clustered t interval over "
           f"{int(pred['seeds'].iloc[0])} seeds. A point the design did not run is predicted with {aliased} taken "
           "as zero. The best is a candidate, not a finding: test it on fresh seeds, declared before it runs.")
    return [Section(title, how, md)]


@FIGURES.register("factor_effects")
def factor_effects_figure(ctx: Context) -> list[Section]:
    effects = _effects(ctx)
    if effects is None:
        return []
    mains = [e for e in dict.fromkeys(effects["effect"]) if ":" not in e]
    readings = list(dict.fromkeys(effects["reading"]))
    fig, axes = plt.subplots(1, len(mains), figsize=(3.2 * len(mains), 3), sharey=True, squeeze=False)
    for ax, effect in zip(axes[0], mains):
        for k, (reading, marker) in enumerate(zip(readings, "os")):
            part = effects[(effects["effect"] == effect) & (effects["reading"] == reading)]
            pos = np.arange(len(part)) + (k - (len(readings) - 1) / 2) * 0.18  # the readings side by side
            ax.errorbar(pos, part["estimate"], yerr=[part["estimate"] - part["low"], part["high"] - part["estimate"]],
                        fmt=marker, capsize=3, label=reading)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(np.arange(len(part)), part["level"], rotation=30)
        ax.set_title(effect)
    axes[0][0].set_ylabel("oracle gain vs grand mean")
    axes[0][-1].legend(fontsize=7)
    folder = ctx.out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(folder / "factor_effects.png", dpi=120)
    plt.close(fig)
    return [Section("Factor main effects", "Each level's deviation from the grand mean, 95% interval over seeds, at "
                    "equal updates (circles) and at equal training compute (squares).",
                    "![factor effects](figures/factor_effects.png)")]
