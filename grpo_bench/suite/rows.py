"""One cell's rows of results.parquet, built from the trainer's files (schema: grpo_bench.suite.results).

A finished cell gives ``update``, ``final``, ``video``, ``grad`` and ``strip`` rows plus its ``cell``
row; a failed cell one ``cell`` row (metric ``error``) from its ERROR.json; a cell whose files cannot
be read one ``cell`` row with status ``broken`` and the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_bench.atomic import read_jsonl
from grpo_bench.suite.machine import machine
from grpo_bench.suite.results import COLUMNS, write_table
from grpo_bench.suite.run_folder import ERROR, ROWS
from grpo_bench.suite.strips import strip_rows

if TYPE_CHECKING:  # pandas is imported where tables are built, so markers and paths load fast
    import pandas as pd

EMPTY_CONFIG = {"setting": "", "method": "", "kl": "", "equalizer": False, "seed": 0}
"""The fixed columns of a row that belongs to no cell (the ``suite`` row)."""


def _is_scalar(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def cell_rows(cell_dir: Path, meta: dict[str, Any], wall_time: float | None = None,
              status: str = "done") -> pd.DataFrame:
    """This cell's rows of results.parquet, built from the trainer's files (deterministic)."""
    rows: list[dict[str, Any]] = []
    metrics = read_jsonl(cell_dir / "metrics.jsonl")  # a torn last line is skipped
    last: dict[str, float] = {}
    for i, line in enumerate(metrics):
        u = int(line.get("update", i))
        for k, v in line.items():
            if k == "update":
                continue
            if k == "grad_norm_per_step" and isinstance(v, list):
                rows.append({"kind": "grad", "update": u, "metric": k, "array": [_num(x) for x in v]})
            elif _is_scalar(v):
                rows.append({"kind": "update", "update": u, "metric": k, "value": _num(v)})
                if v is not None:
                    last[k] = float(v)
    final_path = cell_dir / "final.json"
    final = json.loads(final_path.read_text()) if final_path.is_file() else {}
    videos = final.get("eval_videos") or []
    for k, v in _flatten(final, skip=("eval_videos", "base_eval_videos", "update", "precision", "threads")):
        last.setdefault(k, _num(v))
    rows += [{"kind": "final", "metric": k, "value": v} for k, v in sorted(last.items())]
    for v in videos:
        for k, x in v.items():
            if k not in ("prompt", "sample", "seed") and _is_scalar(x):
                rows.append({"kind": "video", "metric": k, "value": _num(x), "prompt": v["prompt"],
                             "sample": int(v.get("sample", 0)), "video_seed": int(v.get("seed", 0))})
    rows += strip_rows(cell_dir, videos)
    # The trainer's own wall time covers every attempt of a resumed cell; the runner's only the last.
    trainer_wall = [v for k, v in last.items() if "wall" in k]
    wall = trainer_wall[0] if trainer_wall else (wall_time if wall_time is not None else math.nan)
    info = {"labels": meta["labels"], "config": meta["config"], "status": status, "machine": machine(),
            **{k: final[k] for k in ("precision", "threads") if k in final}, **(final.get("provenance") or {})}
    rows.append({"kind": "cell", "metric": "wall_time", "value": wall, "text": json.dumps(info, sort_keys=True)})
    return typed_frame(rows, meta)


def failure_rows(cell_dir: Path, meta: dict[str, Any]) -> pd.DataFrame:
    err = json.loads((cell_dir / ERROR).read_text())
    text = {"labels": meta["labels"], "config": meta["config"], "status": "failed",
            "error": f"{err['type']}: {err['message']}"}
    row = {"kind": "cell", "metric": "error", "value": err.get("seconds", math.nan),
           "text": json.dumps(text, sort_keys=True)}
    return typed_frame([row], meta)


def broken_rows(meta: dict[str, Any], reason: str) -> pd.DataFrame:
    """One ``cell`` row for a cell whose files cannot be read; its seed column is left empty when
    the seed itself is the problem."""
    text = {"labels": meta.get("labels", {}), "config": meta.get("config", {}), "status": "broken", "error": reason}
    cfg = dict(meta.get("config") or {})
    try:
        _seed(cfg.get("seed"))
    except ValueError:
        cfg["seed"] = None
    row = {"kind": "cell", "metric": "error", "value": math.nan, "text": json.dumps(text, sort_keys=True, default=str)}
    return typed_frame([row], {**meta, "config": cfg})


def _flatten(d: dict[str, Any], skip: Iterable[str] = (), prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Numeric scalars of a nested dict; nested keys keep their own name (the last value wins)."""
    for k, v in d.items():
        if k in skip:
            continue
        if isinstance(v, dict):
            yield from _flatten(v, skip)
        elif _is_scalar(v) and v is not None:
            yield prefix + k, v


INT64 = (-(2**63), 2**63 - 1)


def _seed(value: Any) -> Any:
    """The seed as an Int64 value; one outside int64 is a ValueError naming it (the cell is broken)."""
    if value is None:
        return None
    if not isinstance(value, int) or not INT64[0] <= value <= INT64[1]:
        raise ValueError(f"seed {value!r} does not fit a 64-bit integer")
    return value


def typed_frame(rows: list[dict[str, Any]], meta: dict[str, Any]) -> pd.DataFrame:
    """``rows`` as a table of COLUMNS, each row given the fixed columns of the cell ``meta`` describes."""
    cfg = meta["config"]
    fixed = {"suite": meta["suite"], "cell": meta["id"], "group": meta["group"], "setting": cfg.get("setting"),
             "method": cfg.get("method"), "kl": cfg.get("kl"), "equalizer": bool(cfg.get("equalizer")),
             "seed": _seed(cfg.get("seed"))}
    import pandas as pd

    frame = pd.DataFrame([{**fixed, **r} for r in rows], columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def write_cell_rows(cell_dir: Path, meta: dict[str, Any], wall_time: float | None = None) -> pd.DataFrame:
    frame = cell_rows(cell_dir, meta, wall_time)
    write_table(cell_dir / ROWS, frame)
    return frame
