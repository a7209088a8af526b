"""Running one cell and recording what happened: the work every backend's worker does.

``run_cell`` trains a cell under its lock (flock: a killed-and-restarted suite never runs a cell twice
at once), records a failure in ERROR.json or writes the cell's rows and DONE, and never raises for a
cell's error. The trainer resumes an unfinished cell from its last checkpoint. A cell asking for
several GPUs is launched with ``accelerate launch`` (grpo_bench.suite.accelerate_launch), each rank
entering this module as ``python -m grpo_bench.suite.cell CELL_DIR TRAINER``.

The trainer is passed as an import path ``module:function`` so that workers can import it. This module
imports torch only inside workers, after the thread and GPU environment is set.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_bench import interrupt
from grpo_bench.atomic import DiskFull, is_disk_full
from grpo_bench.suite.accelerate_launch import launch_accelerate
from grpo_bench.suite.locks import _release, _try_flock
from grpo_bench.suite.rows import write_cell_rows
from grpo_bench.suite.run_folder import CELL, ERROR, is_done, mark_done, record_failure

Emit = Callable[[tuple], None]


@dataclass
class Outcome:
    """What happened to one cell in this invocation."""

    cell: str
    status: str
    """done | failed | skipped (DONE before) | busy (locked by another process) | interrupted (Ctrl-C:
    stopped at a checkpoint, or never started)."""
    train_s: float = 0.0
    """Seconds inside the trainer."""
    rows_s: float = 0.0
    """Seconds building the cell's rows of results.parquet."""
    error: str = ""
    disk_full: bool = False


def load_trainer(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def run_cell(meta: dict[str, Any], cell_dir: str, trainer: str, emit: Emit, slot: int = 0,
             gpus: list[int] | None = None) -> Outcome:
    """Train one cell under a lock, record failure or write its rows; never raises for a cell error."""
    cdir = Path(cell_dir)
    if interrupt.requested():  # queued before Ctrl-C: never started
        return Outcome(meta["id"], "interrupted")
    cdir.mkdir(parents=True, exist_ok=True)
    lock = _try_flock(cdir / ".lock")
    if lock is None:
        return Outcome(meta["id"], "busy")
    try:
        if is_done(cdir):  # finished by another runner since we were scheduled
            return Outcome(meta["id"], "skipped")
        (cdir / ERROR).unlink(missing_ok=True)
        _record_attempt(cdir)
        total = meta["config"]["updates"]
        emit(("start", slot, meta["id"], meta["group"], meta["labels"].get("seed"), total))
        t0 = time.perf_counter()
        try:
            if gpus is not None and len(gpus) > 1:
                launch_accelerate(cdir, trainer, gpus, lambda u: emit(("update", slot, meta["id"], u, total, None)),
                                  meta.get("launch"))
            else:
                from grpo_bench.config.run import RunConfig

                train = load_trainer(trainer)

                def progress(update: int, total_: int, metrics: dict[str, Any]) -> None:
                    emit(("update", slot, meta["id"], update, total_, metrics.get("reward")))
                    if interrupt.requested() and update < total_:  # a safe point: the update is written
                        raise interrupt.Interrupted(f"stopped after update {update}")

                train(RunConfig(**meta["config"]), cdir, resume=True, progress=progress)
        except interrupt.Interrupted:
            took = time.perf_counter() - t0
            emit(("end", slot, meta["id"], "interrupted", took))
            return Outcome(meta["id"], "interrupted", took)
        except Exception as exc:  # a failing cell is recorded; the suite goes on
            took = time.perf_counter() - t0
            rec = record_failure(cdir, exc, took)
            emit(("end", slot, meta["id"], "failed", took))
            if is_disk_full(exc):
                return Outcome(meta["id"], "failed", took, error=str(DiskFull(getattr(exc, "path", None) or
                                                                               getattr(exc, "filename", None) or cdir)),
                               disk_full=True)
            return Outcome(meta["id"], "failed", took, error=f"{rec['type']}: {rec['message']}")
        took = time.perf_counter() - t0
        t1 = time.perf_counter()
        write_cell_rows(cdir, meta, wall_time=took)
        if not is_done(cdir):
            mark_done(cdir)
        rows_s = time.perf_counter() - t1
        emit(("end", slot, meta["id"], "done", took))
        return Outcome(meta["id"], "done", took, rows_s)
    finally:
        _release(lock, cdir / ".lock")


def failed(meta: dict[str, Any], cdir: Path, exc: BaseException) -> Outcome:
    """The outcome of a cell whose worker or job failed outside ``run_cell`` (recorded in ERROR.json)."""
    rec = record_failure(cdir, exc, 0.0)
    return Outcome(meta["id"], "failed", error=f"{rec['type']}: {rec['message']}")


ATTEMPTS = "attempts.jsonl"


def _record_attempt(cdir: Path) -> None:
    """One line per attempt at a cell: host, pid and torch's thread count. The thread count changes
    float rounding (numbers are byte-identical only at equal thread counts) but is not part of the
    cell id: it is a property of the machine and of --jobs, and a suite resumed with another --jobs
    must not re-run its finished cells. It is recorded here instead."""
    import json

    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    line = {"host": socket.gethostname(), "pid": os.getpid(), "threads": threads, "started": time.time()}
    from grpo_bench.atomic import append_line

    append_line(cdir / ATTEMPTS, json.dumps(line))


def _main_cell(argv: list[str]) -> None:
    """Entry of ``python -m grpo_bench.suite.cell CELL_DIR TRAINER`` (one process per GPU under accelerate)."""
    import json

    from grpo_bench.config.run import RunConfig

    cdir, trainer = Path(argv[0]), argv[1]
    meta = json.loads((cdir / CELL).read_text())
    load_trainer(trainer)(RunConfig(**meta["config"]), cdir, resume=True)


if __name__ == "__main__":
    _main_cell(sys.argv[1:])
