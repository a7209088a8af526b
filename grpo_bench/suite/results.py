"""The suite's one results table: its schema, its grid columns, and reading and writing it (docs/design.md §7).

Each cell's rows are built by grpo_bench.suite.rows; grpo_bench.suite.aggregate gathers them into
``runs/<suite>/results.parquet`` (the run folder's layout: grpo_bench.suite.run_folder).

``results.parquet`` is one long table; ``kind`` says what a row is (on disk, each run of one update's or one
video's metrics is stored as one row: grpo_bench.suite.results_codec, which ``write_table`` and ``read_table``
go through). Columns:

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

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_bench.atomic import atomic_write
from grpo_bench.suite.run_folder import RESULTS

if TYPE_CHECKING:  # pandas is imported where tables are built, so markers and paths load fast
    import pandas as pd

COLUMNS = {
    "suite": "string", "cell": "string", "group": "string", "setting": "string", "method": "string",
    "kl": "string", "equalizer": "boolean", "seed": "Int64", "kind": "string", "update": "Int64",
    "metric": "string", "value": "float64", "prompt": "string", "sample": "Int64", "video_seed": "Int64",
    "array": "object", "shape": "object", "text": "string",
}


def write_table(path: Path, frame: pd.DataFrame) -> None:
    """A results table (results.parquet, a cell's rows.parquet) written atomically, in the compact layout of
    grpo_bench.suite.results_codec (the one place that encodes and decodes it)."""
    from grpo_bench.suite.results_codec import write_frame

    atomic_write(path, lambda tmp: write_frame(tmp, frame))


def read_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """The long table stored at ``path`` (any layout grpo-bench wrote); ``columns`` reads only these. Unchecked:
    ``load_results`` checks a results.parquet a user names."""
    from grpo_bench.suite.results_codec import read_frame

    return read_frame(Path(path), columns)


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



def check_results_file(path: Path) -> None:
    """A readable results.parquet with the columns grpo-bench writes, or one line saying what is wrong
    (a missing file is left to the caller, which says how to make one). Reads only the footer."""
    from grpo_bench.errors import UserError

    if not path.is_file():
        return
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow raises several types for truncated or foreign files
        raise UserError(f"{path}: not a readable parquet file ({' '.join(str(exc).split())[:200]}); "
                        "rerun `grpo-bench run` on the suite to rebuild it") from None
    missing = sorted(set(COLUMNS) - names)
    if missing:
        raise UserError(f"{path}: not a grpo-bench results table (missing columns {', '.join(missing[:5])})")


def check_column_types(frame: pd.DataFrame, path: Path) -> None:
    """Every fixed column holds its declared type (a table of another schema with our column names is refused
    in one line naming the column, not met later as a traceback in whatever reads it first)."""
    from grpo_bench.errors import UserError

    for column, kind in COLUMNS.items():
        if kind == "object" or str(frame[column].dtype) == kind:
            continue
        try:
            frame[column].astype(kind)
        except (TypeError, ValueError) as exc:
            raise UserError(f"{path}: column {column!r} is not {kind} ({' '.join(str(exc).split())[:120]}); "
                            "not a grpo-bench results table") from None


def load_results(path: str | Path) -> pd.DataFrame:
    """results.parquet of a run folder (or the file itself), checked: readable, our columns, their types."""
    from grpo_bench.errors import UserError

    path = Path(path)
    file = path / RESULTS if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{path}: no {RESULTS} (run the suite first: grpo-bench run SUITE)")
    check_results_file(file)
    try:
        frame = read_table(file)
    except UserError:
        raise
    except Exception as exc:  # a footer that reads but pages that do not (a file cut or damaged inside)
        raise UserError(f"{file}: not a readable parquet file ({' '.join(str(exc).split())[:200]})") from None
    check_column_types(frame, file)
    return frame
