"""Finished cells back from a stored results table (``grpo-bench restore``): a committed report, or another suite's
folder, seeds a run folder so that ``run`` / ``tune`` skip those cells and resume the rest.

A cell id names its science (config/identity.py), so a finished cell of any stored table is that run wherever it
is needed: a tuning grid stopped in one session, a table whose cells another suite already ran. Each restored
folder holds what aggregation reads (``rows.parquet``: the cell's rows of the stored table; ``cell.json``; and
``DONE``), no checkpoints or videos; a folder already present is never touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_bench.atomic import atomic_write_json
from grpo_bench.errors import UserError
from grpo_bench.preflight import folder_name
from grpo_bench.suite.results import COLUMNS, load_results, write_table
from grpo_bench.suite.run_folder import CELL, ROWS, mark_done


def _cell_record(text: Any, cell: str, where: str) -> dict[str, Any]:
    """A cell row's JSON record ({status, labels, config, ...}) checked: an object whose labels and config are
    objects. A stored table is untrusted input: broken JSON is one line, not a traceback."""
    if not isinstance(text, str):
        return {}
    try:
        info = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{where}cell {cell!r}: its record is not JSON ({exc}); the table is damaged") from None
    if not isinstance(info, dict):
        raise UserError(f"{where}cell {cell!r}: its record is not a JSON object; the table is damaged")
    for key in ("labels", "config"):
        if not isinstance(info.get(key, {}), dict):
            raise UserError(f"{where}cell {cell!r}: {key!r} in its record is not an object; the table is damaged")
    return info


def _target(suite_dir: Path, cell: str, where: str) -> Path:
    """The cell's folder under ``suite_dir``; a cell id that is not one plain folder name ('../..', 'a/b') or
    whose place holds a file or a dangling link is refused here, before anything is written."""
    folder_name(cell, f"{where}cell id: ")
    folder = Path(suite_dir) / cell
    if folder.is_symlink() and not folder.exists():
        raise UserError(f"{where}cell {cell!r}: {folder} is a dangling symbolic link; remove it and restore again")
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{where}cell {cell!r}: {folder} is a file, not a cell folder; move it and restore again")
    return folder


def restore_cells(stored: Path, suite_dir: Path, only: set[str] | None = None) -> tuple[list[str], list[str]]:
    """(restored, kept): the finished cells of ``stored`` (a results.parquet or the folder holding one) written
    into ``suite_dir``; ``only`` limits them to these ids. Cells that exist in ``suite_dir`` are kept as they are.
    The whole table is checked (schema, types, every record, every cell id) before the first file is written."""
    frame = load_results(stored)
    where = f"{stored}: "
    cells = frame[frame["kind"] == "cell"].drop_duplicates("cell")
    todo, kept = [], []
    for row in cells.itertuples():
        info = _cell_record(row.text, str(row.cell), where)
        if info.get("status") != "done" or (only is not None and row.cell not in only):
            continue
        folder = _target(suite_dir, str(row.cell), where)
        if folder.exists():
            kept.append(str(row.cell))
        else:
            todo.append((row, info, folder))
    if not todo and not kept:
        raise UserError(f"{stored}: no finished cells to restore")
    restored = []
    for row, info, folder in todo:
        part = frame[frame["cell"] == row.cell][list(COLUMNS)].reset_index(drop=True)
        folder.mkdir(parents=True)
        write_table(folder / ROWS, part)
        atomic_write_json(folder / CELL, {"id": row.cell, "suite": str(row.suite), "labels": info.get("labels", {}),
                                          "group": str(row.group), "config": info.get("config", {}),
                                          "restored_from": str(stored)})
        mark_done(folder)
        restored.append(str(row.cell))
    return restored, kept
