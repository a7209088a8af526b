"""Finished cells back from a stored results table (``grpo-bench restore``): a committed report, or another suite's
folder, seeds a run folder so that ``run`` / ``tune`` skip those cells and resume the rest.

A cell id names its science (train/identity.py), so a finished cell of any stored table is that run wherever it
is needed: a tuning grid stopped in one session, a table whose cells another suite already ran. Each restored
folder holds what aggregation reads (``rows.parquet``: the cell's rows of the stored table; ``cell.json``; and
``DONE``), no checkpoints or videos; a folder already present is never touched.
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo_bench.atomic import atomic_write_json
from grpo_bench.errors import UserError
from grpo_bench.suite.results import COLUMNS, load_results, write_table
from grpo_bench.suite.run_folder import CELL, ROWS, mark_done


def restore_cells(stored: Path, suite_dir: Path, only: set[str] | None = None) -> tuple[list[str], list[str]]:
    """(restored, kept): the finished cells of ``stored`` (a results.parquet or the folder holding one) written
    into ``suite_dir``; ``only`` limits them to these ids. Cells that exist in ``suite_dir`` are kept as they are."""
    frame = load_results(stored)
    cells = frame[frame["kind"] == "cell"].drop_duplicates("cell")
    restored, kept = [], []
    for row in cells.itertuples():
        info = json.loads(row.text) if isinstance(row.text, str) else {}
        if info.get("status") != "done" or (only is not None and row.cell not in only):
            continue
        folder = Path(suite_dir) / str(row.cell)
        if folder.exists():
            kept.append(str(row.cell))
            continue
        part = frame[frame["cell"] == row.cell][list(COLUMNS)].reset_index(drop=True)
        folder.mkdir(parents=True)
        write_table(folder / ROWS, part)
        atomic_write_json(folder / CELL, {"id": row.cell, "suite": str(row.suite), "labels": info.get("labels", {}),
                                          "group": str(row.group), "config": info.get("config", {}),
                                          "restored_from": str(stored)})
        mark_done(folder)
        restored.append(str(row.cell))
    if not restored and not kept:
        raise UserError(f"{stored}: no finished cells to restore")
    return restored, kept
