"""``grpo-bench study analyze KIT``: the study's Table 3 from votes.sqlite and the kit's key.

Per dimension: the target's win rate against each baseline (a tie counts half), with a 95% percentile
interval from a bootstrap that resamples raters and prompts (votes of one rater, or on one prompt,
are not independent); Bradley–Terry strengths of every row; Krippendorff's alpha; left/right position
bias; rater consistency on repeated pairs; attention checks (failing raters are excluded and counted);
and for world kits the agreement of the humans with the oracle and with the judge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpo_bench.errors import UserError
from grpo_bench.report.stats import cluster_bootstrap
from grpo_bench.study import votes as votes_db
from grpo_bench.study.kit import DIMENSIONS, VOTES, load_key, load_kit


@dataclass
class AnalyzeOptions:
    min_attention: float = 0.75
    """A rater is kept when at least this share of the attention checks they answered passed."""
    n_boot: int = 2000
    seed: int = 0


def resolve(votes: pd.DataFrame, key: dict[str, Any], prompts: dict[str, str]) -> pd.DataFrame:
    """Votes with sides resolved: kind, chosen clip, target outcome (1 / 0.5 / 0), prompt, baseline row."""
    if votes.empty:
        return votes.assign(kind=[], chosen=[], outcome=[], prompt=[], baseline_row=[], went_left=[])
    pairs = key["pairs"]
    v = votes.copy()
    v["kind"] = v["pair_id"].map(lambda p: pairs.get(p, {}).get("kind", "unknown"))
    v["chosen"] = np.where(v["choice"] == "left", v["left_clip"], np.where(v["choice"] == "right", v["right_clip"], ""))
    target = v["pair_id"].map(lambda p: pairs.get(p, {}).get("target"))
    v["outcome"] = np.where(v["choice"] == "tie", 0.5, (v["chosen"] == target).astype(float))
    v["prompt"] = v["pair_id"].map(prompts)
    v["baseline_row"] = v["pair_id"].map(lambda p: pairs.get(p, {}).get("baseline_row"))
    v["went_left"] = (v["choice"] == "left").astype(float)
    return v


def attention(v: pd.DataFrame, key: dict[str, Any], min_pass: float) -> pd.DataFrame:
    """Per rater: checks answered, passed, kept. Both checks are read on visual quality, where the right
    answer is unambiguous: identical clips -> 'tie'; a broken clip -> the intact one."""
    pairs = key["pairs"]
    checks = v[v["kind"].isin(["identical", "broken"]) & (v["dimension"] == "vq")]
    passed = np.where(checks["kind"] == "identical", checks["choice"] == "tie",
                      checks["chosen"] == checks["pair_id"].map(lambda p: pairs[p].get("intact")))
    per = pd.DataFrame({"rater": checks["rater"], "passed": passed.astype(float)})
    out = pd.DataFrame({"rater": sorted(v["rater"].unique())}).set_index("rater")
    grouped = per.groupby("rater")["passed"]
    out["checks"] = grouped.count().reindex(out.index).fillna(0).astype(int)
    out["passed"] = grouped.sum().reindex(out.index).fillna(0).astype(int)
    out["kept"] = (out["checks"] == 0) | (out["passed"] >= min_pass * out["checks"] - 1e-9)
    return out


def bradley_terry(wins: dict[tuple[str, str], float], items: list[str], iters: int = 2000) -> dict[str, float]:
    """log-strengths (mean 0) by Hunter's MM iteration; wins[(i, j)] = i's wins over j (ties as half)."""
    idx = {it: k for k, it in enumerate(items)}
    w = np.zeros((len(items), len(items)))
    for (i, j), x in wins.items():
        w[idx[i], idx[j]] += x
    n = w + w.T
    p = np.ones(len(items))
    for _ in range(iters):
        denom = (n / (p[:, None] + p[None, :])).sum(axis=1)
        new = np.where(denom > 0, w.sum(axis=1) / np.where(denom > 0, denom, 1), p)
        new = np.clip(new, 1e-12, None)
        new /= np.exp(np.log(new).mean())
        if np.allclose(new, p, rtol=1e-10, atol=0):
            break
        p = new
    logs = np.log(p)
    return {it: float(logs[idx[it]] - logs.mean()) for it in items}


def alpha_gap(v: pd.DataFrame) -> str:
    """Why Krippendorff's alpha is not defined for these votes, in words; '' when it is."""
    if v.empty:
        return "no votes"
    if v["rater"].nunique() < 2:
        return "needs votes of 2 raters"
    if (v.groupby("pair_id")["rater"].nunique() < 2).all():
        return "no pair was rated by 2 raters"
    if v["outcome"].nunique() < 2:
        return "every vote is the same, so there is no disagreement to measure"
    return ""


def alpha(v: pd.DataFrame) -> float:
    """Krippendorff's alpha (ordinal: baseline < tie < target) over main pairs; NaN where ``alpha_gap`` says."""
    import krippendorff

    if alpha_gap(v):
        return math.nan
    table = v.pivot_table(index="rater", columns="pair_id", values="outcome", aggfunc="first")
    return float(krippendorff.alpha(reliability_data=table.to_numpy(dtype=float), level_of_measurement="ordinal"))


def _interval(y: pd.Series, frame: pd.DataFrame, opts: AnalyzeOptions) -> dict[str, float]:
    mean, lo, hi = cluster_bootstrap(y.to_numpy(float), [frame["rater"], frame["prompt"]], opts.n_boot, opts.seed)
    return {"rate": mean, "ci_low": lo, "ci_high": hi, "votes": len(y),
            "raters": int(frame["rater"].nunique()), "prompts": int(frame["prompt"].nunique())}


def _agreement(main: pd.DataFrame, key: dict[str, Any], score: str, opts: AnalyzeOptions) -> dict[str, float]:
    """Share of non-tie human votes that pick the clip with the higher score (score ties dropped)."""
    clips = key["clips"]

    def val(cid: str) -> float:
        x = clips.get(cid, {}).get("scores", {}).get(score)
        return math.nan if x is None else float(x)

    frame = main[main["choice"] != "tie"].copy()
    if frame.empty:
        return {"rate": math.nan, "votes": 0}
    left, right = frame["left_clip"].map(val), frame["right_clip"].map(val)
    keep = left.notna() & right.notna() & (left != right)
    frame = frame[keep]
    if frame.empty:
        return {"rate": math.nan, "votes": 0}
    agree = ((left[keep] > right[keep]) == (frame["choice"] == "left")).astype(float)
    return _interval(agree, frame, opts)


def analyze(root: str | Path, opts: AnalyzeOptions | None = None) -> dict[str, Any]:
    opts = opts or AnalyzeOptions()
    kit, key = load_kit(root), load_key(root)
    raw = votes_db.read_votes(kit.root / VOTES)
    if raw.empty:
        raise UserError(f"{kit.root / VOTES}: no votes yet (serve the kit first: grpo-bench study serve {kit.root})")
    v = resolve(raw, key, {p.id: p.prompt for p in kit.pairs})
    att = attention(v, key, opts.min_attention)
    kept = set(att.index[att["kept"]])
    v = v[v["rater"].isin(kept)]
    main = v[v["kind"] == "main"]
    result: dict[str, Any] = {
        "target": key["target"], "setting": key.get("setting"), "ties": "a tie counts as half a win",
        "raters": {"total": len(att), "excluded": int((~att["kept"]).sum()), "kept": len(kept),
                   "min_attention": opts.min_attention},
        "win_rates": [], "bradley_terry": {}, "alpha": {}, "alpha_gap": {}, "position_left": {}, "consistency": {},
        "oracle_agreement": {}, "judge_agreement": {},
    }
    for base in key["baselines"]:
        for dim in DIMENSIONS:
            part = main[(main["baseline_row"] == base) & (main["dimension"] == dim)]
            result["win_rates"].append({"baseline": base, "dimension": dim, **_interval(part["outcome"], part, opts)})
    for dim in DIMENSIONS:
        part = main[main["dimension"] == dim]
        wins: dict[tuple[str, str], float] = {}
        for r in part.itertuples():
            wins[(key["target"], r.baseline_row)] = wins.get((key["target"], r.baseline_row), 0.0) + r.outcome
            wins[(r.baseline_row, key["target"])] = wins.get((r.baseline_row, key["target"]), 0.0) + 1 - r.outcome
        result["bradley_terry"][dim] = bradley_terry(wins, [key["target"], *key["baselines"]]) if wins else {}
        result["alpha"][dim] = alpha(part)
        result["alpha_gap"][dim] = alpha_gap(part)
        sided = part[part["choice"] != "tie"]
        result["position_left"][dim] = _interval(sided["went_left"], sided, opts)
        result["consistency"][dim] = _consistency(v[v["dimension"] == dim], key)
        if key.get("world"):
            result["oracle_agreement"][dim] = _agreement(part, key, f"oracle_{dim}", opts)
            result["judge_agreement"][dim] = _agreement(part, key, "judge_reward", opts)
    result["attention"] = att.reset_index().to_dict(orient="records")
    return result


def _consistency(v: pd.DataFrame, key: dict[str, Any]) -> dict[str, float]:
    """Share of repeated pairs answered the same way (the same row chosen, or tie both times) by the same
    rater. A repeat shows the same videos under fresh clip ids, so answers are compared by outcome."""
    rep = v[v["kind"] == "repeat"]
    if rep.empty:
        return {"rate": math.nan, "repeats": 0}
    first = v.set_index(["rater", "pair_id"])["outcome"]
    same = [first.get((r.rater, key["pairs"][r.pair_id]["of"])) == r.outcome for r in rep.itertuples()
            if (r.rater, key["pairs"][r.pair_id]["of"]) in first.index]
    return {"rate": float(np.mean(same)) if same else math.nan, "repeats": len(same)}
