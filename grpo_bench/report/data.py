"""Views of results.parquet (grpo_bench.suite.results documents its schema) used by tables and figures."""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from grpo_bench.config import expected_compute, metrics
from grpo_bench.rewards.base import SETTINGS
from grpo_bench.suite.results import COLUMNS, add_grid_columns, grid_keys
from grpo_bench.suite.strips import BASE_STRIP, strip_pixels

KEYS = ["cell", "group", "setting", "seed"]
ORACLE = {"vq": "oracle_vq", "mq": "oracle_mq", "ta": "oracle_ta"}


def oracle_overall(frame: pd.DataFrame, prefix: str = "") -> pd.Series:
    """The setting-weighted oracle score w_vq*VQ + w_mq*MQ + w_ta*TA (the held-out 'true' reward).

    A stratified label ("A, reward=world_oracle", ``stratify``) weighs by its setting, the part before
    the first comma."""
    out = pd.Series(0.0, index=frame.index)
    setting = frame["setting"].astype(str).str.split(",").str[0]
    for dim, col in ORACLE.items():
        weight = setting.map(lambda s, d=dim: SETTINGS[s][d] if s in SETTINGS else np.nan)
        out = out + weight * frame[prefix + col].astype(float)
    return out


def cell_infos(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """cell -> its stored record (labels: the grid values that made it; config: the resolved run config; status)."""
    rows = df[df["kind"] == "cell"].drop_duplicates("cell")
    return {r.cell: json.loads(r.text) for r in rows.itertuples() if isinstance(r.text, str)}


def with_grid_columns(df: pd.DataFrame) -> pd.DataFrame:
    """The table with one column per varied grid key; files written before those columns existed get
    them rebuilt from the labels and configs their cell rows carry."""
    infos = cell_infos(df)
    keys = grid_keys([{"labels": i.get("labels", {})} for i in infos.values()])
    missing = [k for k in keys if k not in df.columns]
    if not missing:
        return df
    return add_grid_columns(df.copy(), {c: i.get("config", {}) for c, i in infos.items()}, missing)


def stratify(df: pd.DataFrame, strata: list[str] | None) -> pd.DataFrame:
    """The table with each cell's ``setting`` label extended by its other stratum keys' values
    ("A, reward=world_oracle") and those keys dropped from its row label: every part of a report
    (baseline rows, bold, Holm families, power) works within one label."""
    extra = [k for k in (strata or []) if k != "setting"]
    if not extra:
        return df
    labels = {c: ", ".join(f"{k}={i.get('config', {}).get(k)}" for k in extra) for c, i in cell_infos(df).items()}
    out = df.copy()
    rows = out["cell"].isin(list(labels))  # every row of a cell with a record, whatever its kind
    out.loc[rows, "setting"] = out.loc[rows, "setting"].astype(str) + ", " + out.loc[rows, "cell"].map(labels)
    group = out.loc[rows, "group"].astype(str)
    group = group.map({g: functools.reduce(without_key, extra, g) for g in group.unique()})  # once a distinct label
    out.loc[rows, "group"] = group.where(group != "", "base")
    return out


def varied_keys(df: pd.DataFrame) -> list[str]:
    """Grid keys the table varies (its columns beyond the fixed schema), e.g. noise_level, kl_weight."""
    return [c for c in df.columns if c not in COLUMNS]


def without_key(group: str, key: str) -> str:
    """A row label with one ``key=value`` part removed (e.g. to pair equalizer on/off lines)."""
    return re.sub(rf"\s*\b{re.escape(key)}=\S+", "", group).strip()


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
                    "error": info.get("error", ""), "machine": info.get("machine", ""), "config": info["config"],
                    "code": _code(info)})
    return pd.DataFrame(out, columns=["cell", "group", "setting", "seed", "method", "kl", "equalizer", "status",
                                      "wall_time", "error", "machine", "config", "code"])


def _code(info: dict[str, Any]) -> str:
    """'grpo-bench 0.1.0 @ 1a2b3c4d' of a cell (empty for cells run before it was recorded)."""
    if "git_commit" not in info and "grpo_bench_version" not in info:
        return ""
    return f"grpo-bench {info.get('grpo_bench_version', '?')} @ {str(info.get('git_commit', '?'))[:12]}"


def finals(df: pd.DataFrame) -> pd.DataFrame:
    """One row per finished cell: the last value of every scalar metric, plus oracle_overall."""
    rows = df[df["kind"] == "final"]
    # Index on KEYS only: metric names (e.g. 'kl') may equal config column names.
    wide = rows.pivot_table(index=KEYS, columns="metric", values="value", aggfunc="last").reset_index()
    wide.columns.name = None
    info = df[df["kind"] == "cell"].drop_duplicates("cell").set_index("cell")
    wide.insert(4, "method", wide["cell"].map(info["method"]))
    wide.insert(5, "equalizer", wide["cell"].map(info["equalizer"]))
    for key in varied_keys(df):  # every grid key as a column of its own (noise_level, kl_weight, ...)
        if key not in wide:  # a metric of the same name (grid key 'reward' vs metric 'reward') keeps its column
            wide[key] = wide["cell"].map(info[key])
    if all(f"eval_{c}" in wide for c in ORACLE.values()):
        wide["eval_oracle_overall"] = oracle_overall(wide, "eval_")
    return wide


def curves(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = df[(df["kind"] == "update") & (df["metric"] == metric)]
    extra = [k for k in varied_keys(df) if k not in KEYS]
    return rows[KEYS + ["method", "kl", "equalizer", *extra, "update", "value"]].dropna(subset=["value"])


def _trains_on_oracle(reward: Any) -> bool:
    """A run trained on an oracle itself (a reward registered as some prompt set's ground truth): its logged
    'eval_reward' / 'judge_reward' is the oracle composite, not a judge's score, so the report leaves its Judge
    columns empty (nothing is judged there)."""
    from grpo_bench.rewards import is_ground_truth

    return isinstance(reward, str) and is_ground_truth(reward)


def _without_judge_where_oracle_trains(wide: pd.DataFrame, column: str, df: pd.DataFrame) -> pd.DataFrame:
    cells = {c for c, i in cell_infos(df).items() if _trains_on_oracle(i.get("config", {}).get("reward"))}
    if column in wide and cells:
        wide.loc[wide["cell"].isin(cells), column] = np.nan
    return wide


def eval_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Eval updates only: judge reward and oracle overall on the eval prompts, one row per (cell, update)."""
    rows = df[(df["kind"] == "update") & df["metric"].str.startswith("eval_")]
    wide = rows.pivot_table(index=KEYS + ["update"], columns="metric", values="value", aggfunc="last").reset_index()
    wide.columns.name = None
    if "eval_at" in wide:  # the policy evaluated: before update u, or after the last one
        wide["update"] = wide["eval_at"].fillna(wide["update"]).astype(int)
    if all(f"eval_{c}" in wide for c in ORACLE.values()):
        wide["eval_oracle_overall"] = oracle_overall(wide, "eval_")
    return _without_judge_where_oracle_trains(wide, "eval_reward", df)


def _number(value: Any) -> float:
    """A float, NaN for a missing value (pandas NA: a metric one reward track logs and another does not)."""
    return math.nan if pd.isna(value) else float(value)


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
        row.update({m: _number(end[m]) - _number(start[m]) for m in metrics})  # NaN where a metric is absent
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
    return _without_judge_where_oracle_trains(wide, "judge_reward", df)


def grads(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[df["kind"] == "grad"]
    return rows[KEYS + ["method", "equalizer", "update", "array"]]


def strips(df: pd.DataFrame, base: bool = False) -> dict[tuple[str, str], list[tuple[str, np.ndarray]]]:
    """(setting, group) -> [(prompt, uint8 [frames, H, W, 3])] for the lowest seed of the group: the final
    policy's eval videos, or with ``base`` the same cell's base model (its eval at update 0)."""
    rows = df[df["kind"] == "strip"]
    is_base = rows["metric"].astype(str) == BASE_STRIP
    rows = rows[is_base] if base else rows[~is_base]
    out: dict[tuple[str, str], list[tuple[str, np.ndarray]]] = {}
    for (setting, group), part in rows.groupby(["setting", "group"], sort=False):
        seed = part["seed"].min()
        for r in part[part["seed"] == seed].itertuples():
            arr = strip_pixels(r.text, r.array, r.shape)[0]
            out.setdefault((setting, group), []).append((r.prompt, arr))
    return out


def suite_info(df: pd.DataFrame) -> dict[str, Any]:
    rows = df[df["kind"] == "suite"]
    return json.loads(rows["text"].iloc[0]) if len(rows) else {}


COMPUTE_COLUMNS = (*metrics.COMPUTE_COUNTS, metrics.COMPUTE_TRAINING)
TRAINING_TIMES = (metrics.TIME_ROLLOUT, metrics.TIME_REWARD, metrics.TIME_TRAIN)
"""What ``compute_seconds`` sums (train/trainer.py): a stored cell's logged phase times give the same."""


def compute_curves(df: pd.DataFrame) -> pd.DataFrame:
    """The run totals of model passes (grpo_bench/train/compute.py) of every finished or running cell at each
    point ``update`` = 0, 1, ..., n (the policy after that many updates; 0: nothing computed yet), keyed like
    ``eval_curves``: one row per (cell, update) with every ``metrics.COMPUTE_COUNTS`` kind, compute_training,
    compute_seconds (for a stored cell: its logged time_rollout + time_reward + time_train, summed) and
    ``derived``: False where the cell logged its counts, True where it was stored before the counters existed
    and the counts are the closed form of its stored config (``expected_compute.expected_curve``, the formula
    the counter is tested against). A cell whose config no longer builds, or whose method's passes have no
    closed form (``expected_compute.HOOKS``), gets NaN counts (derived True)."""
    columns = [*KEYS, "method", "update", *COMPUTE_COLUMNS, metrics.COMPUTE_SECONDS, "derived"]
    rows = df[df["kind"] == "update"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    first = rows.drop_duplicates("cell").set_index("cell")
    phases = rows[rows["metric"].isin(TRAINING_TIMES)].groupby(["cell", "update"])["value"].sum()
    logged = rows[rows["metric"].isin([*COMPUTE_COLUMNS, metrics.COMPUTE_SECONDS])]
    wide = (logged.pivot_table(index=["cell", "update"], columns="metric", values="value", aggfunc="last")
            if len(logged) else pd.DataFrame())
    counted = set(wide.index.get_level_values("cell")) if len(wide) else set()
    if counted:  # every logged total as a float (NaN where a cell did not log it), read once for all cells
        wide = wide.reindex(columns=[*COMPUTE_COLUMNS, metrics.COMPUTE_SECONDS]).astype(float)
    n_updates = rows.groupby("cell", sort=False)["update"].max()
    infos = cell_infos(df)
    out: list[dict[str, Any]] = []
    for cell, top in n_updates.items():
        f = first.loc[cell]
        key = {"cell": cell, "group": f["group"], "setting": f["setting"], "seed": f["seed"], "method": f["method"]}
        n = int(top) + 1
        if cell in counted:
            part = wide.loc[cell]
            out.append({**key, "update": 0, **dict.fromkeys(COMPUTE_COLUMNS, 0.0),
                        metrics.COMPUTE_SECONDS: 0.0, "derived": False})
            out += [{**key, "update": int(u) + 1, **totals, "derived": False}
                    for u, totals in zip(part.index, part.to_dict("records"))]
            continue
        shape = _stored_compute_shape(infos.get(cell, {}).get("config"))
        try:
            curve = expected_compute.expected_curve(shape, n) if shape is not None else [{}] * (n + 1)
        except expected_compute.ClosedFormUnknown:
            curve = [{}] * (n + 1)
        mine = phases.loc[cell] if cell in phases.index.get_level_values("cell") else pd.Series(dtype=float)
        seconds = [0.0, *mine.reindex(range(n)).cumsum().tolist()]  # the logged phase times, summed
        for u, counts in enumerate(curve):
            out.append({**key, "update": u, **{c: float(counts.get(c, math.nan)) for c in COMPUTE_COLUMNS},
                        metrics.COMPUTE_SECONDS: seconds[u], "derived": True})
    return pd.DataFrame(out, columns=columns)


def _stored_compute_shape(data: Any) -> expected_compute.ComputeShape | None:
    """The compute section of a cell's stored config, or None where it no longer builds (a removed method...).
    Resolved as a cell's config is (its method's options filled in): a stored config read back from disk may lack
    them, and the closed form needs the run's KL."""
    from grpo_bench.config.run import from_dict, resolve
    from grpo_bench.config.sections import section
    from grpo_bench.errors import UserError

    try:
        return section(resolve(from_dict(dict(data or {}))), expected_compute.ComputeShape)
    except (UserError, TypeError, ValueError):
        return None
