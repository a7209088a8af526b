"""Judge-vs-oracle agreement as a function of how far RL moved the model from the base (``judge_agreement``).

Computed from stored results only (the final eval's per-video rows and the eval curves). A *pair* is two
eval videos of the same setting, seed, prompt, sample and initial noise made by two different rows
(groups) of the suite: the same question answered by two trained policies. The judge *agrees* when it
prefers the same video as the oracle (``judge_reward`` against the setting-weighted ``oracle_overall``);
a tie on either side counts half, so a judge that knows nothing scores 0.5.

A pair's distance from the base model is the larger of its two cells' distances, by two measures:

* ``manifold``: |change of the cell's mean oracle manifold distance on the eval prompts since update 0|;
  every cell has it (the oracle is exact; 0 = the eval videos did not move off or onto the world).
* ``kl``: the cell's mean logged KL to the reference over its updates; only cells that log a KL term
  (methods with ``kl: none`` log 0 and are left out).

Pairs are binned by quantiles of the distance within each setting (``BINS`` bins), and each bin's
agreement carries a 95% bootstrap interval that resamples seeds (videos of a seed share policies).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.parts import TABLES, Context, Section
from grpo_bench.report.stats import cluster_bootstrap, interval_text
from grpo_bench.report.tables import write_table

BINS = 3
VIDEO_KEY = ["seed", "prompt", "sample", "video_seed"]
DISTANCES = {"manifold": "|Δ oracle manifold| since update 0", "kl": "mean logged KL"}


def cell_distances(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: cell, manifold (|Δ eval_manifold| since update 0), kl (mean logged KL, NaN if none)."""
    gain = data.learning(df)
    out = pd.DataFrame({"cell": gain["cell"]}) if not gain.empty else pd.DataFrame(columns=["cell"])
    out["manifold"] = gain["eval_manifold"].abs().to_numpy() if "eval_manifold" in gain else np.nan
    kl = data.curves(df, "kl").groupby("cell")["value"].mean() if (df["metric"] == "kl").any() else pd.Series()
    kl = kl[kl > 0]  # 'kl: none' logs zeros: not a measured distance
    out["kl"] = out["cell"].map(kl).astype(float)
    return out


def agreement_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per pair of paired eval videos from two groups: setting, seed, a, b, agree (1, 0.5, 0), and
    the pair's distances (max over the two cells) per DISTANCES."""
    vids = data.videos(df)
    columns = ["setting", "seed", "a", "b", "agree", *DISTANCES]
    if vids.empty or "judge_reward" not in vids or "oracle_overall" not in vids:
        return pd.DataFrame(columns=columns)
    dist = cell_distances(df).set_index("cell")
    vids = vids.dropna(subset=["judge_reward", "oracle_overall"])
    out = []
    for setting, part in vids.groupby("setting", sort=True):
        groups = [g for g in data.group_order(df) if g in set(part["group"])]
        for a, b in itertools.combinations(groups, 2):
            j = part[part["group"] == a].set_index(VIDEO_KEY).join(
                part[part["group"] == b].set_index(VIDEO_KEY), how="inner", lsuffix="_a", rsuffix="_b").reset_index()
            if j.empty:
                continue
            judge = np.sign(j["judge_reward_a"] - j["judge_reward_b"])
            oracle = np.sign(j["oracle_overall_a"] - j["oracle_overall_b"])
            agree = np.where((judge == 0) | (oracle == 0), 0.5, (judge == oracle).astype(float))
            row = pd.DataFrame({"setting": setting, "seed": j["seed"], "a": a, "b": b, "agree": agree})
            for name in DISTANCES:
                da, db = j["cell_a"].map(dist[name]), j["cell_b"].map(dist[name])
                row[name] = np.fmax(da, db).where(da.notna() & db.notna()).to_numpy(dtype=float)
            out.append(row)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=columns)


def agreement_by_distance(pairs: pd.DataFrame, bins: int = BINS) -> pd.DataFrame:
    """Per setting, distance measure and quantile bin (plus an 'all' row): pairs, seeds, agreement, 95% CI."""
    out = []
    for setting, part in pairs.groupby("setting", sort=True):
        rows = [("all", "all", part, np.nan, np.nan)]
        for name in DISTANCES:
            have = part.dropna(subset=[name])
            if have.empty:
                continue
            edges = np.unique(np.quantile(have[name], np.linspace(0, 1, bins + 1)))
            which = np.clip(np.searchsorted(edges, have[name], side="right") - 1, 0, max(len(edges) - 2, 0))
            for k in range(max(len(edges) - 1, 1)):
                sub = have[which == k]
                lo, hi = edges[k], edges[min(k + 1, len(edges) - 1)]
                rows.append((name, f"{k + 1}", sub, lo, hi))
        for name, label, sub, lo, hi in rows:
            if sub.empty:
                continue
            rate, ci_lo, ci_hi = cluster_bootstrap(sub["agree"].to_numpy(dtype=float), [sub["seed"]])
            out.append({"setting": setting, "distance": name, "bin": label, "low": lo, "high": hi,
                        "pairs": len(sub), "seeds": int(sub["seed"].nunique()), "agreement": rate,
                        "ci_low": ci_lo, "ci_high": ci_hi})
    return pd.DataFrame(out, columns=["setting", "distance", "bin", "low", "high", "pairs", "seeds", "agreement",
                                      "ci_low", "ci_high"])


@TABLES.register("judge_agreement")
def judge_agreement(ctx: Context) -> list[Section]:
    title = "Judge vs oracle: pairwise agreement by distance from the base model"
    table = agreement_by_distance(agreement_pairs(ctx.df))
    if table.empty:
        return [Section(title, "Not available: no paired eval videos with both judge and oracle scores.", "")]
    rows = []
    for r in table.itertuples():
        span = "all pairs" if r.distance == "all" else f"{DISTANCES[r.distance]} in [{r.low:.4g}, {r.high:.4g}]"
        rows.append([r.setting, span, str(r.pairs), str(r.seeds),
                     f"{r.agreement:.3f} {interval_text(r.ci_low, r.ci_high, r.seeds)}"])
    md = write_table(ctx.out, "judge_agreement", ["Setting", "distance from base (pair's farther cell)", "pairs",
                                                  "seeds", "agreement [95% CI]"], rows, table, "llrrr")
    how = ("Two eval videos of the same seed, prompt and noise from two rows: does the judge prefer the same one "
           "as the oracle? 0.5 = chance (ties count half). Bins are distance terciles within a setting; the "
           "interval resamples seeds. A judge worth hacking agrees near the base and drifts to chance far from it.")
    return [Section(title, how, md)]
