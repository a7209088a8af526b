"""Gathering a suite's cells into results.parquet (schema: grpo_bench.suite.results).

A cell whose files cannot be read gets one ``broken`` row naming the file; every other cell
aggregates as usual.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_bench.suite.results import COLUMNS, add_grid_columns, grid_keys, read_table, write_table
from grpo_bench.suite.rows import EMPTY_CONFIG, broken_rows, cell_rows, failure_rows, typed_frame, write_cell_rows
from grpo_bench.suite.run_folder import ERROR, RESULTS, ROWS, is_done

if TYPE_CHECKING:  # pandas is imported where tables are built, so markers and paths load fast
    import pandas as pd


def _cell_part(suite_dir: Path, meta: dict[str, Any], write: bool) -> pd.DataFrame | None:
    cdir = suite_dir / meta["id"]
    if is_done(cdir):
        rows_path = cdir / ROWS
        if rows_path.is_file():
            try:
                return read_table(rows_path)
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
    frame = pd.concat(parts, ignore_index=True) if parts else typed_frame([], {"suite": "", "id": "", "group": "",
                                                                                "config": EMPTY_CONFIG})
    if info is not None:
        suite_row = typed_frame([{"kind": "suite", "text": json.dumps(info, sort_keys=True, default=str)}],
                                {"suite": info.get("name", ""), "id": "", "group": "", "config": EMPTY_CONFIG})
        frame = pd.concat([suite_row, frame], ignore_index=True)
    frame = frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})
    frame = add_grid_columns(frame, {m["id"]: m["config"] for m in metas}, grid_keys(metas))
    if write:
        write_table(suite_dir / RESULTS, frame)
    return frame
