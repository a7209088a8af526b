"""Run directories, atomic writes, failure records and the suite's one results table (docs/design.md §7).

Layout of a suite run::

    runs/<suite>/
      suite.yaml              the suite file as run (copied at start)
      results.parquet         every cell aggregated (schema below); the report reads only this
      <cell-id>/              one cell (id = cell_id of the resolved RunConfig, train/identity.py)
        cell.json             id, suite, labels (grid values), group, resolved config (written first)
        config.yaml           resolved config (the trainer)
        metrics.jsonl         one line per update (the trainer)
        final.json            last metrics, last eval, wall time, eval_videos (the trainer)
        samples/final_eval.pt final eval videos Tensor[N, 3, F, H, W] in [-1, 1] (the trainer)
        rows.parquet          this cell's rows of results.parquet (the runner, after the trainer)
        ERROR.json            type, message, traceback of a failed attempt (removed on retry)
        DONE                  written last: the cell is finished and is never run again

``results.parquet`` is one long table; ``kind`` says what a row is. Columns:

=========  ==========  =====================================================================
column     type        meaning
=========  ==========  =====================================================================
suite      str         suite name
cell       str         cell id
group      str         the cell's row label without seed and setting ("sage_grpo kl=dual")
setting    str         reward setting (A, B)
method     str         method name (resolved)
kl         str         KL variant (resolved)
equalizer  bool        equalizer on/off (resolved)
seed       int64       run seed
kind       str         suite | cell | update | final | video | grad | strip (see below)
update     Int64       update index (update, grad rows), null otherwise
metric     str         metric name (cell, update, final, video rows)
value      float64     the metric's value (NaN when the trainer logged null)
prompt     str         eval prompt (video, strip rows)
sample     Int64       sample index within the prompt (video rows)
video_seed Int64       the eval video's noise seed (video rows): pairs videos across methods
array      list<f64>   grad: per-step gradient norms (NaN = untrained step)
shape      list<i64>   strip: pixel array shape [videos, frames, H, W, 3]
text       str         cell: JSON {labels, config, status, error, machine}; suite: JSON;
                       strip: base64 PNG of the frames side by side (``strip_pixels`` decodes it;
                       files written before this stored the pixels in ``array``)
<grid key> typed       one column per key a grid varies (``noise_level``, ``kl_weight``, a method
                       option ...): the cell's resolved value (JSON text for lists); older files
                       lack them and ``with_grid_columns`` rebuilds them from the cell rows
=========  ==========  =====================================================================

A cell whose files cannot be read (a corrupt ``final.json``, a truncated ``rows.parquet``, a
corrupt ``final_eval.pt``, a seed outside int64) gets one ``cell`` row with status ``broken`` and
the reason; every other cell aggregates as usual.

kinds: ``suite`` one row: text = JSON {name, description, report spec}; ``cell`` one row per cell
(metric ``wall_time``; failed cells: metric ``error``);
``update`` one row per (update, metric) of metrics.jsonl (scalars only); ``final`` the last
non-null value of every scalar metric plus the numeric scalars of final.json; ``video`` one row
per (eval video, metric) of final.json's eval_videos; ``grad`` one row per diagnostic update
(metric ``grad_norm_per_step``); ``strip`` one row per prompt: the first sample's frames at four
evenly spaced times, for the figure of sample frames.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_bench.atomic import atomic_write, atomic_write_bytes, atomic_write_json, atomic_write_text, read_jsonl

if TYPE_CHECKING:  # pandas is imported where tables are built, so markers and paths load fast
    import pandas as pd

RESULTS = "results.parquet"
ROWS = "rows.parquet"
DONE = "DONE"
ERROR = "ERROR.json"
CELL = "cell.json"
STRIP_PROMPTS = 4
"""Eval prompts shown per cell in the frame strip."""
STRIP_FRAMES = 4
"""Frames per video in the strip (evenly spaced, first and last included)."""

COLUMNS = {
    "suite": "string", "cell": "string", "group": "string", "setting": "string", "method": "string",
    "kl": "string", "equalizer": "boolean", "seed": "Int64", "kind": "string", "update": "Int64",
    "metric": "string", "value": "float64", "prompt": "string", "sample": "Int64", "video_seed": "Int64",
    "array": "object", "shape": "object", "text": "string",
}


# Atomic writes live in grpo_bench.atomic; re-exported here for run-directory code.
__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "read_jsonl"]


def _atomic_parquet(path: Path, frame: pd.DataFrame) -> None:
    atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


# --- markers and records --------------------------------------------------------------------
def is_done(cell_dir: Path) -> bool:
    return (cell_dir / DONE).is_file()


def mark_done(cell_dir: Path) -> None:
    atomic_write_text(cell_dir / DONE, "")


def record_failure(cell_dir: Path, exc: BaseException, attempt_seconds: float) -> dict[str, Any]:
    """ERROR.json with the exception and its traceback; the suite goes on with the other cells.

    A DONE cell stays done (DONE wins over ERROR: a late failure report never marks it failed), and a
    record that cannot be written (a full disk) is still returned: this never raises for its own I/O."""
    record = {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "seconds": attempt_seconds,
    }
    if is_done(cell_dir):
        return record
    try:
        atomic_write_json(cell_dir / ERROR, record)
    except OSError as write_error:  # DiskFull included
        record["not_written"] = str(write_error)
    return record


# --- one cell's rows --------------------------------------------------------------------------
def _is_scalar(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


BASE_STRIP = "base"
"""``metric`` of the strip rows of the base model (the cell's eval at update 0, ``samples/base_eval.pt``);
the final policy's strip rows have no metric."""


def _strip_rows(cell_dir: Path, videos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """First sample of the first STRIP_PROMPTS prompts: STRIP_FRAMES frames each, as uint8; of the final
    policy and, where stored, of the base model (same prompts and noise)."""
    rows = _strip_rows_of(cell_dir / "samples" / "final_eval.pt", videos)
    base = _strip_rows_of(cell_dir / "samples" / "base_eval.pt", videos)
    return rows + [{**r, "metric": BASE_STRIP} for r in base]


def _strip_rows_of(path: Path, videos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not path.is_file() or not videos:
        return []
    import torch

    clip = torch.load(path, map_location="cpu", weights_only=True)  # Tensor[N, 3, F, H, W]
    first: dict[str, int] = {}
    for i, row in enumerate(videos[: clip.shape[0]]):
        first.setdefault(row["prompt"], i)
    rows = []
    frames = clip.shape[2]
    pick = torch.linspace(0, frames - 1, min(STRIP_FRAMES, frames)).round().long()
    for prompt, i in list(first.items())[:STRIP_PROMPTS]:
        img = ((clip[i, :, pick].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)  # [3, K, H, W]
        img = img.permute(1, 2, 3, 0).unsqueeze(0)  # [1, K, H, W, 3]
        rows.append({"kind": "strip", "prompt": prompt, "sample": int(videos[i].get("sample", 0)),
                     "text": _png(img[0].numpy()), "shape": list(img.shape)})
    return rows


def _png(frames: Any) -> str:
    """uint8 [K, H, W, 3] -> base64 PNG of the K frames side by side (lossless, ~20x smaller than floats)."""
    import imageio.v3 as iio
    import numpy as np

    k, h, w, c = frames.shape
    wide = np.ascontiguousarray(frames.transpose(1, 0, 2, 3).reshape(h, k * w, c))
    return base64.b64encode(iio.imwrite("<bytes>", wide, extension=".png")).decode("ascii")


def strip_pixels(text: Any, array: Any, shape: Any) -> Any:
    """uint8 [videos, frames, H, W, 3] of a strip row: from its PNG text, or an older file's array."""
    import numpy as np

    shape = [int(x) for x in shape]
    if isinstance(text, str) and text:
        import imageio.v3 as iio

        wide = iio.imread(io.BytesIO(base64.b64decode(text)), extension=".png")  # [H, K*W, 3]
        _, k, h, w, c = shape
        return wide.reshape(h, k, w, c).transpose(1, 0, 2, 3)[None].astype(np.uint8)
    return np.asarray(array, dtype=np.uint8).reshape(shape)


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
    rows += _strip_rows(cell_dir, videos)
    # The trainer's own wall time covers every attempt of a resumed cell; the runner's only the last.
    trainer_wall = [v for k, v in last.items() if "wall" in k]
    wall = trainer_wall[0] if trainer_wall else (wall_time if wall_time is not None else math.nan)
    info = {"labels": meta["labels"], "config": meta["config"], "status": status, "machine": machine(),
            **{k: final[k] for k in ("precision", "threads") if k in final}, **(final.get("provenance") or {})}
    rows.append({"kind": "cell", "metric": "wall_time", "value": wall, "text": json.dumps(info, sort_keys=True)})
    return _frame(rows, meta)


def machine() -> str:
    """One line naming the machine a cell ran on (for the report header)."""
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} CPUs, {gpu}, "
            f"torch {torch.__version__}, {platform.system()} {platform.release()}")


def failure_rows(cell_dir: Path, meta: dict[str, Any]) -> pd.DataFrame:
    err = json.loads((cell_dir / ERROR).read_text())
    text = {"labels": meta["labels"], "config": meta["config"], "status": "failed",
            "error": f"{err['type']}: {err['message']}"}
    row = {"kind": "cell", "metric": "error", "value": err.get("seconds", math.nan),
           "text": json.dumps(text, sort_keys=True)}
    return _frame([row], meta)


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


def _frame(rows: list[dict[str, Any]], meta: dict[str, Any]) -> pd.DataFrame:
    cfg = meta["config"]
    fixed = {"suite": meta["suite"], "cell": meta["id"], "group": meta["group"], "setting": cfg.get("setting"),
             "method": cfg.get("method"), "kl": cfg.get("kl"), "equalizer": bool(cfg.get("equalizer")),
             "seed": _seed(cfg.get("seed"))}
    import pandas as pd

    frame = pd.DataFrame([{**fixed, **r} for r in rows], columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def write_cell_rows(cell_dir: Path, meta: dict[str, Any], wall_time: float | None = None) -> pd.DataFrame:
    frame = cell_rows(cell_dir, meta, wall_time)
    _atomic_parquet(cell_dir / ROWS, frame)
    return frame


# --- the suite table ------------------------------------------------------------------------
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
    return _frame([row], {**meta, "config": cfg})


def _cell_part(suite_dir: Path, meta: dict[str, Any], write: bool) -> pd.DataFrame | None:
    import pandas as pd

    cdir = suite_dir / meta["id"]
    if is_done(cdir):
        rows_path = cdir / ROWS
        if rows_path.is_file():
            try:
                return pd.read_parquet(rows_path)
            except Exception:  # a truncated or foreign rows.parquet: rebuild it from the trainer's files
                pass
        return write_cell_rows(cdir, meta) if write else cell_rows(cdir, meta)
    if (cdir / ERROR).is_file():
        return failure_rows(cdir, meta)
    return None


def _reason(meta: dict[str, Any], exc: BaseException) -> str:
    where = getattr(exc, "filename", None)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{where + ': ' if where else ''}{type(exc).__name__}: {text}"[:300]


def grid_keys(metas: list[dict[str, Any]]) -> list[str]:
    """Keys the cells' grids vary (their labels), in first-seen order, without seed and the fixed columns."""
    keys: dict[str, None] = {}
    for meta in metas:
        for k in meta.get("labels", {}):
            if k not in COLUMNS and k != "seed":
                keys.setdefault(k)
    return list(keys)


def _grid_value(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def add_grid_columns(frame: pd.DataFrame, configs: dict[str, dict[str, Any]], keys: list[str]) -> pd.DataFrame:
    """One typed column per grid key: each row's cell's resolved config value."""
    for key in keys:
        values = {cell: _grid_value(cfg.get(key)) for cell, cfg in configs.items()}
        column = frame["cell"].map(values)
        kinds = {type(v) for v in values.values() if v is not None}
        if kinds <= {bool}:
            column = column.astype("boolean")
        elif kinds <= {int}:
            column = column.astype("Int64")
        elif kinds <= {int, float}:
            column = column.astype("float64")
        else:
            column = column.map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v)).astype("string")
        frame[key] = column
    return frame


def aggregate(suite_dir: Path, metas: list[dict[str, Any]], info: dict[str, Any] | None = None,
              write: bool = True) -> pd.DataFrame:
    """results.parquet from the given cells (finished: their rows; failed: an error row; unreadable:
    a ``broken`` row naming the file); ``write=False`` builds the table without touching any file.

    Only the cells of the current expansion are read, so a stale cell folder from an older
    version of the suite never leaks into the table. One broken cell never stops the others.
    """
    import pandas as pd

    parts = []
    for meta in metas:
        try:
            part = _cell_part(suite_dir, meta, write)
            if part is not None:
                part = part.astype({k: v for k, v in COLUMNS.items() if v != "object"})
        except Exception as exc:  # isolation: report this cell, aggregate the rest
            part = broken_rows(meta, _reason(meta, exc))
        if part is not None:
            parts.append(part[list(COLUMNS)])
    frame = pd.concat(parts, ignore_index=True) if parts else _frame([], {"suite": "", "id": "", "group": "",
                                                                            "config": _EMPTY_CFG})
    if info is not None:
        suite_row = _frame([{"kind": "suite", "text": json.dumps(info, sort_keys=True, default=str)}],
                           {"suite": info.get("name", ""), "id": "", "group": "", "config": _EMPTY_CFG})
        frame = pd.concat([suite_row, frame], ignore_index=True)
    frame = frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})
    frame = add_grid_columns(frame, {m["id"]: m["config"] for m in metas}, grid_keys(metas))
    if write:
        _atomic_parquet(suite_dir / RESULTS, frame)
    return frame


_EMPTY_CFG = {"setting": "", "method": "", "kl": "", "equalizer": False, "seed": 0}


def load_results(path: str | Path) -> pd.DataFrame:
    """results.parquet of a run folder (or the file itself)."""
    from grpo_bench.errors import UserError

    path = Path(path)
    file = path / RESULTS if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{path}: no {RESULTS} (run the suite first: grpo-bench run SUITE)")
    import pandas as pd

    return pd.read_parquet(file)
