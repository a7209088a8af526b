"""A suite's run folder: its file names, the DONE marker and the failure record (docs/design.md §7).

Layout of a suite run::

    runs/<suite>/
      suite.yaml              the suite file as run (copied at start)
      results.parquet         every cell aggregated (schema: grpo_bench.suite.results); the report reads only this
      <cell-id>/              one cell (id = cell_id of the resolved RunConfig, config/identity.py)
        cell.json             id, suite, labels (grid values), group, resolved config (written first)
        config.yaml           resolved config (the trainer)
        metrics.jsonl         one line per update (the trainer)
        final.json            last metrics, last eval, wall time, eval_videos (the trainer)
        samples/final_eval.pt final eval videos Tensor[N, 3, F, H, W] in [-1, 1] (the trainer)
        rows.parquet          this cell's rows of results.parquet (the runner, after the trainer)
        ERROR.json            type, message, traceback of a failed attempt (removed on retry)
        DONE                  written last: the cell is finished and is never run again

Atomic writes of these files live in grpo_bench.atomic.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from grpo_bench.atomic import atomic_write_json, atomic_write_text

RESULTS = "results.parquet"
ROWS = "rows.parquet"
DONE = "DONE"
ERROR = "ERROR.json"
CELL = "cell.json"


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
