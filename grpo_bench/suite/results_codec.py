"""The on-disk layout of a results table (results.parquet, a cell's rows.parquet): the one place that encodes
and decodes it (schema: grpo_bench.suite.results).

A results table is long: one row per (update, metric), per (eval video, metric), per final metric. Stored that
way, the ``value`` column interleaves thirty metrics of different scales and compresses poorly. On disk, a *run*
(consecutive rows that agree on every column but ``metric`` and ``value``, with distinct metrics and no
``array``, ``shape`` or ``text``: one update's metrics, one eval video's, a cell's final metrics) is stored as
ONE row: its first row with ``metric`` and ``value`` empty, ``RUN_METRICS`` the run's metric names in order
(JSON), and each value in the column ``VALUE_PREFIX + metric``. Decoding puts every run back in its place, so a
reader gets the very frame that was written (columns, dtypes, values and row order). Every other row (cells,
strips, gradients, the suite row) is stored as it is.

A file in this layout says so in its parquet metadata (``LAYOUT_KEY``); a file without it (written before this
layout) is the long table itself and reads as it always did. The encoder checks that its output decodes to its
input and stores the long table otherwise, so the layout can never lose a value.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_bench.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

LAYOUT_KEY = b"grpo_bench.layout"
LAYOUT_RUNS = b"runs/1"
"""The one compact layout so far; a file naming another is refused (written by a newer grpo-bench)."""
RUN_METRICS = "run_metrics"
VALUE_PREFIX = "value:"
RUN_FREE = ("array", "shape", "text")
"""Columns a run's rows must leave empty (rows with pixels, gradients or records are stored as they are)."""
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 19}
"""Measured on the eleven tables stored under reports/ (pyarrow 26): long layout, snappy (pandas' default) 32.0 MB
(twelve tables then), zstd level 19 15.81 MB; this layout with float columns byte-stream-split 11.64 MB. Writing
the largest (0.39 M rows) takes 22 s against 15-17 s long on a busy 2-core machine; reading it 1.0-1.3 s either
way. Results are written once and read many times."""


def _runs(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """(start, stop) of every run of two rows or more, split where a metric would repeat."""
    import numpy as np

    n = len(frame)
    if n < 2:
        return []
    free = np.ones(n, dtype=bool)
    for column in RUN_FREE:
        free &= frame[column].isna().to_numpy(dtype=bool)
    free &= frame["metric"].notna().to_numpy(dtype=bool)
    same = free.copy()
    same[1:] &= free[:-1]
    same[0] = False
    for column in frame.columns:
        if column in ("metric", "value", *RUN_FREE):
            continue
        values = frame[column]
        now, before = values.iloc[1:].reset_index(drop=True), values.iloc[:-1].reset_index(drop=True)
        try:
            equal = (now == before).fillna(False).to_numpy(dtype=bool)
        except (TypeError, ValueError):  # a column of lists or arrays: its rows are stored as they are
            return []
        same[1:] &= equal | (now.isna() & before.isna()).to_numpy(dtype=bool)
    metrics = frame["metric"].to_numpy(dtype=object)
    bounds = [*np.flatnonzero(~same).tolist(), n]
    runs = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        if stop - start >= 2 and len(set(metrics[start:stop])) < stop - start:
            runs += _split_at_repeats(metrics, start, stop)
        elif stop - start >= 2:
            runs.append((start, stop))
    return runs


def _split_at_repeats(metrics: Any, start: int, stop: int) -> list[tuple[int, int]]:
    """Runs of two rows or more in [start, stop), each ending before a metric it already holds."""
    runs, seen = [], set()
    for i in range(start, stop):
        if metrics[i] in seen:
            if i - start >= 2:
                runs.append((start, i))
            start, seen = i, set()
        seen.add(metrics[i])
    if stop - start >= 2:
        runs.append((start, stop))
    return runs


def encode(frame: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """(the frame to store, whether it is in the runs layout): the runs layout when it decodes to ``frame``
    exactly, else ``frame`` itself."""
    import numpy as np
    import pandas as pd

    if RUN_METRICS in frame.columns or any(str(c).startswith(VALUE_PREFIX) for c in frame.columns) \
            or not set(("metric", "value", *RUN_FREE)) <= set(frame.columns):
        return frame, False
    frame = frame.reset_index(drop=True)
    runs = _runs(frame)
    if not runs:
        return frame, False
    metric = frame["metric"].to_numpy(dtype=object)
    value = frame["value"].to_numpy(dtype="float64", na_value=np.nan)
    keep = np.ones(len(frame), dtype=bool)
    names = np.full(len(frame), None, dtype=object)
    by_names: dict[tuple[str, ...], list[int]] = {}
    for start, stop in runs:
        keep[start + 1:stop] = False
        key = tuple(metric[start:stop])
        names[start] = json.dumps(key)
        by_names.setdefault(key, []).append(start)
    columns = list(dict.fromkeys(m for key in by_names for m in key))
    wide = {m: np.full(len(frame), np.nan) for m in columns}
    for key, starts in by_names.items():
        at = np.asarray(starts)
        for j, m in enumerate(key):
            wide[m][at] = value[at + j]
    out = frame.copy()
    heads = names != None  # noqa: E711 (elementwise)
    out.loc[heads, "value"] = np.nan
    out["metric"] = pd.array(np.where(heads, None, metric), dtype=frame["metric"].dtype)
    out[RUN_METRICS] = pd.array(names, dtype="string")
    extra = pd.DataFrame({VALUE_PREFIX + m: wide[m] for m in columns})
    out = pd.concat([out, extra], axis=1)[keep].reset_index(drop=True)
    try:
        pd.testing.assert_frame_equal(decode(out, "encoder"), frame, check_exact=True)
    except AssertionError:
        return frame, False
    return out, True


def _run_names(text: Any, where: str, columns: set[str]) -> tuple[str, ...]:
    """A run's metric names (a JSON list of distinct names, each with its value column), or one line saying
    the table is damaged."""
    try:
        names = json.loads(text)
    except (TypeError, ValueError):
        names = None
    if not isinstance(names, list) or not names or not all(isinstance(m, str) for m in names) \
            or len(set(names)) != len(names) or not all(VALUE_PREFIX + m in columns for m in names):
        raise UserError(f"{where}: {RUN_METRICS} {str(text)[:80]!r} is not a list of distinct metrics with "
                        f"their {VALUE_PREFIX}<metric> columns; the table is damaged")
    return tuple(names)


def decode(stored: pd.DataFrame, where: str) -> pd.DataFrame:
    """The long table of a frame in the runs layout (``where`` names it in errors)."""
    import numpy as np
    import pandas as pd

    wide = [c for c in stored.columns if str(c).startswith(VALUE_PREFIX)]
    if RUN_METRICS not in stored.columns or "metric" not in stored.columns or "value" not in stored.columns:
        raise UserError(f"{where}: says it is in the runs layout but lacks its {RUN_METRICS}, metric or value "
                        "column; the table is damaged")
    if not pd.api.types.is_string_dtype(stored[RUN_METRICS]):
        raise UserError(f"{where}: column {RUN_METRICS!r} is not text; the table is damaged")
    for column in wide:
        if not pd.api.types.is_float_dtype(stored[column].dtype):
            raise UserError(f"{where}: column {column!r} is not float64; the table is damaged")
    columns = set(stored.columns)
    text = stored[RUN_METRICS].to_numpy(dtype=object, na_value=None)
    heads = np.flatnonzero(text != None)  # noqa: E711 (elementwise)
    keys = {t: _run_names(t, where, columns) for t in set(text[heads])}
    counts = np.ones(len(stored), dtype=np.int64)
    counts[heads] = [len(keys[t]) for t in text[heads]]
    offsets = np.cumsum(counts) - counts
    body = stored.drop(columns=[RUN_METRICS, *wide])
    out = body.iloc[np.repeat(np.arange(len(stored)), counts)].reset_index(drop=True)
    metric = out["metric"].to_numpy(dtype=object, na_value=None)
    value = out["value"].to_numpy(dtype="float64", na_value=np.nan).copy()
    for t, key in keys.items():
        rows = heads[text[heads] == t]
        for j, m in enumerate(key):
            metric[offsets[rows] + j] = m
            value[offsets[rows] + j] = stored[VALUE_PREFIX + m].to_numpy(dtype="float64", na_value=np.nan)[rows]
    out["metric"] = pd.array(metric, dtype=body["metric"].dtype)
    out["value"] = pd.Series(value, dtype=body["value"].dtype)
    return out


def write_frame(tmp: Path | io.BytesIO, frame: pd.DataFrame) -> None:
    """``frame`` as parquet at ``tmp`` (the caller makes it atomic), in the runs layout where it applies."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored, runs = encode(frame)
    table = pa.Table.from_pandas(stored, preserve_index=False)
    if runs:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), LAYOUT_KEY: LAYOUT_RUNS})
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    pq.write_table(table, tmp, use_dictionary=[n for n in table.column_names if n not in floats],
                   use_byte_stream_split=floats, write_statistics=False, **PARQUET_OPTIONS)


def read_frame(path: Path | io.BytesIO, columns: list[str] | None = None) -> pd.DataFrame:
    """The long table stored at ``path`` (either layout); ``columns`` reads only these. Raises what pyarrow
    raises for an unreadable file, and UserError naming the file for a damaged runs layout."""
    import pandas as pd
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    layout = (schema.metadata or {}).get(LAYOUT_KEY)
    if layout is None:
        return pd.read_parquet(path, columns=columns)
    if layout != LAYOUT_RUNS:
        raise UserError(f"{path}: stored in layout {layout.decode(errors='replace')[:40]!r}, which this grpo-bench "
                        f"does not know (it reads {LAYOUT_RUNS.decode()}); update grpo-bench")
    wanted = None
    if columns is not None:
        codec = [RUN_METRICS, "metric", "value", *(n for n in schema.names if n.startswith(VALUE_PREFIX))]
        wanted = list(dict.fromkeys([*columns, *codec]))
    frame = decode(pd.read_parquet(path, columns=wanted), str(path))
    return frame if columns is None else frame[list(columns)]
