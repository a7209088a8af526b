"""The power table: what the suite can tell apart, per comparison and headline metric.

Headline metrics measure *learning*: a cell's held-out evaluation after the last update minus the
same evaluation at update 0 (deterministic ODE, fixed eval noise, held-out prompts). At update 0
every method of a seed is the same base model, so with no learning every row reads 0. A comparison
pairs a row with the suite's baseline row by seed; the seed is the unit of replication, so the
interval is the t-interval over per-seed differences (one value per seed: clustered by
construction), p-values are Holm-adjusted over the setting's whole family of comparisons, and

    sd      per-seed standard deviation of the paired difference
    mde     the true difference the current seeds detect with 80% power (two-sided 5%)
    needed  seeds for 80% power against the suite's stated minimum effect
    verdict decided (CI excludes 0, Holm-adjusted), equivalent (CI inside ±minimum effect) or open
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.parts import TABLES, Context, Section
from grpo_bench.report.power import holm, mde, paired_p, seeds_needed
from grpo_bench.report.stats import mean_ci
from grpo_bench.report.tables import TABLE2, _baseline_group, _fmt, write_table

HEADLINE = TABLE2  # (title, eval metric, +1 higher / -1 lower is better): Table 2's headline columns
MIN_EFFECT = {"Judge": 0.25, "default": 0.05}
"""Minimum effects of interest in each metric's own units (oracle scores and accuracies: 0.05; the
judge is z-scored: 0.25). A suite's report spec `min_effect` (a number, or a mapping by column
title with an optional 'default') replaces them."""


def min_effects(spec_value: object) -> dict[str, float]:
    """The report spec's `min_effect` as {title or 'default': effect}."""
    if spec_value is None:
        return dict(MIN_EFFECT)
    if isinstance(spec_value, dict):
        return {**MIN_EFFECT, **{str(k): float(v) for k, v in spec_value.items()}}
    return {"default": float(spec_value)}


def paired_differences(df: pd.DataFrame, baseline: dict) -> list[dict]:
    """Every headline comparison with the baseline: {setting, row, baseline, metric, better, diffs},
    diffs a Series of per-seed paired learning differences (index: seed; NaN where a metric is missing)."""
    gain = data.learning(df)
    if gain.empty or not baseline:
        return []
    cells = data.cells(df)
    out = []
    for setting in sorted(gain["setting"].unique()):
        groups = _baseline_group(gain, cells, setting, baseline)
        if len(groups) != 1:
            continue
        here = gain[gain["setting"] == setting]
        base = here[here["group"] == groups[0]].set_index("seed")
        for group in [g for g in data.group_order(df) if g != groups[0] and g in set(here["group"])]:
            other = here[here["group"] == group].set_index("seed")
            seeds = base.index.intersection(other.index)
            for title, metric, sign in HEADLINE:
                if metric not in here:
                    continue
                diffs = (other.loc[seeds, metric] - base.loc[seeds, metric]).astype(float)
                if diffs.notna().any():  # a metric this family does not measure (the oracle track's judge)
                    out.append({"setting": setting, "row": group, "baseline": groups[0], "metric": title,
                                "better": "higher" if sign > 0 else "lower", "diffs": diffs})
    return out


def power_rows(df: pd.DataFrame, baseline: dict, effects: dict[str, float] | None = None) -> pd.DataFrame:
    """Long frame: setting, row, baseline, metric, n, diff, ci, p, p_holm, sd, mde, needed, verdict."""
    effects = effects or dict(MIN_EFFECT)
    out = []
    for c in paired_differences(df, baseline):
        d = c["diffs"].dropna().to_numpy()
        mean, half, n = mean_ci(d)
        sd = float(d.std(ddof=1)) if n >= 2 else math.nan
        min_effect = min_effect_of(effects, c["metric"])
        out.append({**{k: c[k] for k in ("setting", "row", "baseline", "metric", "better")}, "n": n, "diff": mean,
                    "ci": half, "p": paired_p(d), "sd": sd, "mde": mde(sd, n), "min_effect": min_effect,
                    "needed": seeds_needed(min_effect, sd)})
    table = pd.DataFrame(out)
    if table.empty:
        return table
    table["p_holm"] = np.nan
    for _, idx in table.groupby("setting").groups.items():
        table.loc[idx, "p_holm"] = holm(table.loc[idx, "p"].to_numpy())
    table["verdict"] = [_verdict(r) for r in table.itertuples()]
    return table


def min_effect_of(effects: dict[str, float], title: str) -> float:
    return effects.get(title, effects.get("default", MIN_EFFECT["default"]))


def _verdict(r) -> str:
    if not (math.isfinite(r.diff) and math.isfinite(r.ci)):
        return "open"
    if math.isfinite(r.p_holm) and r.p_holm < 0.05:
        good = (r.diff > 0) == (r.better == "higher")
        return "decided: better" if good else "decided: worse"
    if abs(r.diff) + r.ci < r.min_effect:
        return "equivalent"
    return "open"


def boundary_text(record: Mapping) -> str:
    """One paragraph for the report: the spending function, the levels used and why seeding stopped."""
    used = record.get("looks", [])
    levels = ", ".join(f"{lk['level']:.2g} at {lk['n']} seed{'s' if lk['n'] != 1 else ''}" for lk in used) or "none yet"
    planned = ", ".join(map(str, record.get("planned", [])))
    stop = record.get("stopped")
    if stop:
        why = {"decided": "every headline comparison was decided",
               "max_seeds": f"decide.max_seeds ({record['max_seeds']}) was reached with comparisons still open",
               "none": "there was no comparison to decide"}.get(stop["reason"], stop["reason"])
        ending = f"Seeding stopped at look {stop['look']} ({stop['n']} seed{'s' if stop['n'] != 1 else ''}): {why}."
    else:
        ending = "Seeding has not stopped yet (rerun `grpo-bench run SUITE --until-decided` to continue)."
    return (f"Seeds were added by `run --until-decided` in blocks of {record['block']} up to {record['max_seeds']} "
            f"(planned looks at {planned} seeds), overall α = {record['alpha']:g} spent with the {record['spending']} "
            f"function; two-sided level per look: {levels}. A comparison is decided when its Holm-adjusted p "
            f"is within the look's level (effect) or the interval at that level is narrower than ± min effect "
            f"(precise). {ending} The `sequential` column gives each comparison's decision and look; the "
            "fixed-level verdict beside it ignores the looks.")


def sequential_verdicts(record: dict | None) -> dict[tuple[str, str, str], str]:
    """(setting, row, metric) -> 'effect at look 2' etc. from a stored ``--until-decided`` record."""
    looks = (record or {}).get("looks") or []
    if not looks:
        return {}
    return {(c["setting"], c["row"], c["metric"]): c["verdict"] + (f" (look {c['since']})" if c.get("since") else "")
            for c in looks[-1].get("comparisons", [])}


@TABLES.register("power")
def power(ctx: Context) -> list[Section]:
    table = power_rows(ctx.df, ctx.spec.get("baseline") or {}, min_effects(ctx.spec.get("min_effect")))
    if table.empty:
        return []
    record = data.suite_info(ctx.df).get("decide")
    sequential = sequential_verdicts(record)
    if sequential:
        table["sequential"] = [sequential.get((r.setting, r.row, r.metric), "–") for r in table.itertuples()]
    rows = []
    for r in table.itertuples():
        missing = r.needed is None or (isinstance(r.needed, float) and math.isnan(r.needed))
        needed = "—" if missing else str(int(r.needed))
        rows.append([r.setting, r.row, r.metric, str(r.n), _fmt(r.diff, r.ci, sign=True),
                     f"{r.p_holm:.3f}" if math.isfinite(r.p_holm) else "–", _fmt(r.sd, math.nan),
                     _fmt(r.mde, math.nan), f"{r.min_effect:g}", needed, r.verdict,
                     *([r.sequential] if sequential else [])])
    header = ["Setting", "Row", "Metric", "seeds", "Δ learning vs baseline", "p (Holm)", "per-seed SD", "MDE",
              "min effect", "seeds needed", "verdict", *(["sequential"] if sequential else [])]
    md = write_table(ctx.out, "power", header, rows, table, "lllrrrrrrrl" + ("l" if sequential else ""))
    how = (f"Learning = held-out eval after the last update minus at update 0, paired with the baseline "
           f"({table['baseline'].iloc[0]}) by seed; 95% t-interval over seeds; Holm over each setting's family; "
           "MDE at 80% power, two-sided 5%; seeds needed for 80% power at the minimum effect (report spec "
           "`min_effect`); verdict: decided (Holm p < 0.05), equivalent (CI inside ± min effect) or open.")
    if record:
        how += " " + boundary_text(record)
    return [Section("Power — what these seeds can tell apart", how, md)]
