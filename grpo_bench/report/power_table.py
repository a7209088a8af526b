"""The power table: what the suite can tell apart, per comparison and headline metric.

Headline metrics measure *learning*: a cell's held-out evaluation after the last update minus the
same evaluation at update 0 (deterministic ODE, fixed eval noise, held-out prompts). At update 0
every method of a seed is the same base model, so with no learning every row reads 0. A comparison
pairs a row with the suite's baseline row by seed; the seed is the unit of replication, so the
interval is the t-interval over per-seed differences (one value per seed: clustered by
construction), p-values are Holm-adjusted over the setting's whole family of comparisons, and

    sd          per-seed standard deviation of the paired difference
    mde         the true difference the current seeds detect with 80% power (two-sided 5%)
    needed      seeds for 80% power against the suite's stated minimum effect
    eval share  the part of the per-seed variance that is evaluation-sample noise (``eval_share``)
    lever       which lever shrinks the MDE: eval size (eval noise is at least half the variance) or seeds
    verdict     decided (Holm-adjusted p < 0.05), equivalent (TOST at 5%: the 90% interval inside
                ± minimum effect) or open
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.parts import TABLES, Context, Section
from grpo_bench.report.power import (
    ALPHA,
    MIN_EFFECT,
    eval_noise_variance,
    holm,
    mde,
    min_effect_of,
    min_effects,
    paired_p,
    seeds_needed,
    tost_half_width,
)
from grpo_bench.report.stats import mean_ci
from grpo_bench.report.tables import TABLE2, _baseline_group, _fmt, write_table

HEADLINE = TABLE2  # (title, eval metric, +1 higher / -1 lower is better): Table 2's headline columns
VIDEO_METRIC = {"Oracle": "oracle_overall", "oVQ": "oracle_vq", "oMQ": "oracle_mq", "oTA": "oracle_ta",
                "Correct": "correct", "Manifold": "manifold", "Judge": "judge_reward"}
"""Headline column -> its per-video score in the final eval's video rows (a cell's eval metric is their
mean). Diversity is a property of the set of videos: it has no per-video score, hence no eval share."""
VIDEO_KEY = ["seed", "prompt", "sample", "video_seed"]
EVAL_LEVER_SHARE = 0.5
"""Eval noise at least this share of the per-seed variance: more eval videos are the lever."""


def paired_differences(df: pd.DataFrame, baseline: dict) -> list[dict]:
    """Every headline comparison with the baseline: {setting, row, baseline, metric, better, diffs, eval_var},
    diffs a Series of per-seed paired learning differences (index: seed; NaN where a metric is missing) and
    eval_var a Series (same index) of each seed's eval-sample noise variance in it (``eval_variances``)."""
    gain = data.learning(df)
    if gain.empty or not baseline:
        return []
    cells = data.cells(df)
    vids = data.videos(df) if (df["kind"] == "video").any() else pd.DataFrame()
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
            pairs = video_pairs(vids, setting, group, groups[0])
            for title, metric, sign in HEADLINE:
                if metric not in here:
                    continue
                diffs = (other.loc[seeds, metric] - base.loc[seeds, metric]).astype(float)
                if diffs.notna().any():  # a metric this family does not measure (the oracle track's judge)
                    out.append({"setting": setting, "row": group, "baseline": groups[0], "metric": title,
                                "better": "higher" if sign > 0 else "lower", "diffs": diffs,
                                "eval_var": eval_variances(pairs, title, seeds)})
    return out


def video_pairs(vids: pd.DataFrame, setting: str, row: str, baseline: str) -> pd.DataFrame:
    """The row's eval videos joined to the baseline's on prompt, sample and initial noise within each seed: every
    per-video score of VIDEO_METRIC, the baseline's with the suffix ``_base`` (empty without video rows)."""
    columns = [c for c in VIDEO_METRIC.values() if c in vids]
    if vids.empty or not columns:
        return pd.DataFrame()
    here = vids[vids["setting"] == setting]
    return here[here["group"] == row].set_index(VIDEO_KEY)[columns].join(
        here[here["group"] == baseline].set_index(VIDEO_KEY)[columns], how="inner", rsuffix="_base").reset_index()


def eval_variances(pairs: pd.DataFrame, title: str, seeds: pd.Index) -> pd.Series:
    """Per seed, the eval-sample noise variance of the paired learning difference of ``title`` (``pairs``: the
    row's and the baseline's eval videos, ``video_pairs``).

    Learning is (final eval - eval at update 0); the update-0 eval of a seed is the same base model on the
    same noise for every row, so it cancels in the pair and the paired difference is the row's final eval
    minus the baseline's: the mean over the seed's eval videos of d = row video - baseline video (paired by
    prompt, sample and initial noise). ``power.eval_noise_variance`` turns those d into the variance of
    their mean that the videos' sampling noise contributes. NaN where there is no per-video score."""
    column = VIDEO_METRIC.get(title)
    out = pd.Series(math.nan, index=seeds, dtype=float)
    if pairs.empty or column not in pairs:
        return out
    pair = pairs.assign(d=pairs[column].astype(float) - pairs[f"{column}_base"].astype(float))
    for seed, part in pair.groupby("seed"):
        if seed in out.index:
            out.loc[seed] = eval_noise_variance(part["d"].to_numpy(), part["prompt"].tolist())
    return out


def eval_share(eval_var: float, sd: float) -> float:
    """Eval-noise share of the per-seed variance: (mean eval-noise variance) / sd^2, capped at 1.

    The per-seed variance is training variance + eval noise; with few seeds its estimate can fall below the
    eval-noise estimate, and the training part's estimate max(0, sd^2 - eval_var) is then 0 (share 1)."""
    if not (math.isfinite(eval_var) and math.isfinite(sd)) or (sd <= 0 and eval_var <= 0):
        return math.nan
    return 1.0 if sd <= 0 else min(1.0, eval_var / sd**2)


def lever(share: float) -> str:
    """Which lever shrinks the MDE: 'eval size' where eval noise is at least half the per-seed variance
    (more eval videos per prompt remove most of it, at a few % of a cell's compute), else 'seeds'."""
    if not math.isfinite(share):
        return "–"
    return "eval size" if share >= EVAL_LEVER_SHARE else "seeds"


def mde_more_eval(sd: float, share: float, n: int, factor: float = 4.0) -> float:
    """MDE at n seeds if each prompt got ``factor`` times the eval videos: eval noise scaled by 1/factor."""
    if not math.isfinite(share):
        return math.nan
    return mde(sd * math.sqrt(1 - share + share / factor), n)


def power_rows(df: pd.DataFrame, baseline: dict, effects: dict[str, float] | None = None) -> pd.DataFrame:
    """Long frame: setting, row, baseline, metric, n, diff, ci (95%), ci90 (the TOST interval), p, p_holm,
    sd, mde, needed, eval_var, eval_share, lever, mde_eval_x4, verdict."""
    effects = effects or dict(MIN_EFFECT)
    out = []
    for c in paired_differences(df, baseline):
        kept = c["diffs"].notna()
        d = c["diffs"][kept].to_numpy()
        mean, half, n = mean_ci(d)
        sd = float(d.std(ddof=1)) if n >= 2 else math.nan
        min_effect = min_effect_of(effects, c["metric"])
        ev = c["eval_var"][kept]
        eval_var = float(ev.mean()) if len(ev) and ev.notna().all() else math.nan
        share = eval_share(eval_var, sd)
        out.append({**{k: c[k] for k in ("setting", "row", "baseline", "metric", "better")}, "n": n, "diff": mean,
                    "ci": half, "ci90": tost_half_width(d, ALPHA), "p": paired_p(d), "sd": sd, "mde": mde(sd, n),
                    "min_effect": min_effect, "needed": seeds_needed(min_effect, sd), "eval_var": eval_var,
                    "eval_share": share, "lever": lever(share), "mde_eval_x4": mde_more_eval(sd, share, n)})
    table = pd.DataFrame(out)
    if table.empty:
        return table
    table["p_holm"] = np.nan
    for _, idx in table.groupby("setting").groups.items():
        table.loc[idx, "p_holm"] = holm(table.loc[idx, "p"].to_numpy())
    table["verdict"] = [_verdict(r) for r in table.itertuples()]
    return table


def _verdict(r) -> str:
    if not (math.isfinite(r.diff) and math.isfinite(r.ci)):
        return "open"
    if math.isfinite(r.p_holm) and r.p_holm < 0.05:
        good = (r.diff > 0) == (r.better == "higher")
        return "decided: better" if good else "decided: worse"
    if math.isfinite(r.ci90) and abs(r.diff) + r.ci90 < r.min_effect:  # TOST at 5% (power.equivalent)
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
        share = f"{100 * r.eval_share:.0f}%" if math.isfinite(r.eval_share) else "–"
        rows.append([r.setting, r.row, r.metric, str(r.n), _fmt(r.diff, r.ci, sign=True),
                     f"{r.p_holm:.3f}" if math.isfinite(r.p_holm) else "–", _fmt(r.sd, math.nan),
                     _fmt(r.mde, math.nan), f"{r.min_effect:g}", needed, share, r.lever, r.verdict,
                     *([r.sequential] if sequential else [])])
    header = ["Setting", "Row", "Metric", "seeds", "Δ learning vs baseline", "p (Holm)", "per-seed SD", "MDE",
              "min effect", "seeds needed", "eval noise", "lever", "verdict", *(["sequential"] if sequential else [])]
    md = write_table(ctx.out, "power", header, rows, table, "lllrrrrrrrrll" + ("l" if sequential else ""))
    md += pooled_shares_text(table)
    how = (f"Learning = held-out eval after the last update minus at update 0, paired with the baseline "
           f"({table['baseline'].iloc[0]}) by seed; 95% t-interval over seeds; Holm over each setting's family; "
           "MDE at 80% power, two-sided 5%; seeds needed for 80% power at the minimum effect (report spec "
           "`min_effect`); eval noise = the share of the per-seed variance that is eval-sample noise (pooled "
           "within-prompt variance of the paired per-video differences / videos per seed, over the per-seed "
           "variance; capped at 100%, 3 seeds make it rough); lever = eval size where that share is ≥ 50% "
           "(more eval videos per prompt shrink the MDE cheaply; `mde_eval_x4` in the CSV: the MDE with 4× the eval "
           "videos), else seeds; verdict: decided (Holm p < 0.05), equivalent (TOST at 5%: the 90% t-interval "
           "inside ± min effect, per comparison) or open.")
    if record:
        how += " " + boundary_text(record)
    return [Section("Power — what these seeds can tell apart", how, md)]


def pooled_shares_text(table: pd.DataFrame, metric: str = "Oracle") -> str:
    """One line per family: eval-noise variance / per-seed variance pooled over its comparisons of ``metric``
    (means of both, so a 3-seed variance estimate of one comparison weighs less)."""
    rows = table[(table["metric"] == metric) & table["eval_var"].notna() & table["sd"].notna()]
    parts = []
    for setting, part in rows.groupby("setting", sort=False):
        seed_var = float((part["sd"] ** 2).mean())
        if seed_var > 0:
            share = float(part["eval_var"].mean()) / seed_var
            raw = f" (raw {100 * share:.0f}%)" if share > 1 else ""
            parts.append(f"{setting} {100 * min(share, 1.0):.0f}%{raw}")
    if not parts:
        return ""
    return (f"\nEval-sample noise as a share of the per-seed variance of {metric} differences, pooled over each "
            "family's comparisons (mean eval-noise variance / mean per-seed variance; raw above 100%: the seeds' "
            f"variance estimate fell below the eval noise alone): {'; '.join(parts)}.\n")
