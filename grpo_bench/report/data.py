"""Views of results.parquet (grpo_bench.suite.results documents its schema) used by tables and figures."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from grpo_bench.rewards.base import SETTINGS

KEYS = ["cell", "group", "setting", "seed"]
ORACLE = {"vq": "oracle_vq", "mq": "oracle_mq", "ta": "oracle_ta"}


def oracle_overall(frame: pd.DataFrame, prefix: str = "") -> pd.Series:
    """The setting-weighted oracle score w_vq*VQ + w_mq*MQ + w_ta*TA (the held-out 'true' reward)."""
    out = pd.Series(0.0, index=frame.index)
    for dim, col in ORACLE.items():
        weight = frame["setting"].map(lambda s, d=dim: SETTINGS[s][d] if s in SETTINGS else np.nan)
        out = out + weight * frame[prefix + col].astype(float)
    return out


def group_order(df: pd.DataFrame) -> list[str]:
    """Groups in the suite's expansion order (the order cells were aggregated)."""
    return list(dict.fromkeys(df.loc[df["kind"] == "cell", "group"]))


def cells(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[df["kind"] == "cell"]
    out = []
    for r in rows.itertuples():
        info = json.loads(r.text)
        out.append({"cell": r.cell, "group": r.group, "setting": r.setting, "seed": r.seed, "method": r.method,
                    "kl": r.kl, "equalizer": r.equalizer, "status": info["status"], "wall_time": r.value,
                    "error": info.get("error", ""), "machine": info.get("machine", ""), "config": info["config"]})
    return pd.DataFrame(out, columns=["cell", "group", "setting", "seed", "method", "kl", "equalizer", "status",
                                      "wall_time", "error", "machine", "config"])


def finals(df: pd.DataFrame) -> pd.DataFrame:
    """One row per finished cell: the last value of every scalar metric, plus oracle_overall."""
    rows = df[df["kind"] == "final"]
    # Index on KEYS only: metric names (e.g. 'kl') may equal config column names.
    wide = rows.pivot_table(index=KEYS, columns="metric", values="value", aggfunc="last").reset_index()
    wide.columns.name = None
    info = df[df["kind"] == "cell"].drop_duplicates("cell").set_index("cell")
    wide.insert(4, "method", wide["cell"].map(info["method"]))
    wide.insert(5, "equalizer", wide["cell"].map(info["equalizer"]))
    if all(f"eval_{c}" in wide for c in ORACLE.values()):
        wide["eval_oracle_overall"] = oracle_overall(wide, "eval_")
    return wide


def curves(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = df[(df["kind"] == "update") & (df["metric"] == metric)]
    return rows[KEYS + ["method", "kl", "equalizer", "update", "value"]].dropna(subset=["value"])


def eval_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Eval updates only: judge reward and oracle overall on the eval prompts, one row per (cell, update)."""
    rows = df[(df["kind"] == "update") & df["metric"].str.startswith("eval_")]
    wide = rows.pivot_table(index=KEYS + ["update"], columns="metric", values="value", aggfunc="last").reset_index()
    wide.columns.name = None
    if "eval_at" in wide:  # the policy evaluated: before update u, or after the last one
        wide["update"] = wide["eval_at"].fillna(wide["update"]).astype(int)
    if all(f"eval_{c}" in wide for c in ORACLE.values()):
        wide["eval_oracle_overall"] = oracle_overall(wide, "eval_")
    return wide


def learning(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: every eval metric at its last evaluation minus the same at update 0."""
    ev = eval_curves(df)
    if ev.empty:
        return ev
    metrics = [c for c in ev.columns if c.startswith("eval_") and c != "eval_at"]
    out = []
    for _, part in ev.groupby("cell", sort=False):
        part = part.sort_values("update")
        start, end = part.iloc[0], part.iloc[-1]
        if start["update"] != 0 or end["update"] == 0:
            continue  # no update-0 baseline, or nothing learned yet: not a learning measurement
        row = {k: start[k] for k in KEYS}
        row.update({m: float(end[m]) - float(start[m]) for m in metrics})
        out.append(row)
    return pd.DataFrame(out)


def videos(df: pd.DataFrame) -> pd.DataFrame:
    """Per eval video of the final ODE eval: oracle scores and oracle_overall, keyed for pairing."""
    rows = df[df["kind"] == "video"]
    wide = rows.pivot_table(index=KEYS + ["prompt", "sample", "video_seed"], columns="metric", values="value",
                            aggfunc="last").reset_index()
    wide.columns.name = None
    if all(c in wide for c in ORACLE.values()):
        wide["oracle_overall"] = oracle_overall(wide)
    return wide


def grads(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[df["kind"] == "grad"]
    return rows[KEYS + ["method", "equalizer", "update", "array"]]


def strips(df: pd.DataFrame) -> dict[tuple[str, str], list[tuple[str, np.ndarray]]]:
    """(setting, group) -> [(prompt, uint8 [frames, H, W, 3])] for the lowest seed of the group."""
    rows = df[df["kind"] == "strip"]
    out: dict[tuple[str, str], list[tuple[str, np.ndarray]]] = {}
    for (setting, group), part in rows.groupby(["setting", "group"], sort=False):
        seed = part["seed"].min()
        for r in part[part["seed"] == seed].itertuples():
            arr = np.asarray(r.array, dtype=np.uint8).reshape([int(s) for s in r.shape])[0]
            out.setdefault((setting, group), []).append((r.prompt, arr))
    return out


def suite_info(df: pd.DataFrame) -> dict[str, Any]:
    rows = df[df["kind"] == "suite"]
    return json.loads(rows["text"].iloc[0]) if len(rows) else {}
