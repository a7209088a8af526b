"""Running a suite's cells: resumable, in parallel, one failure never stops the others.

``run_suite`` writes each cell's ``cell.json``, skips cells marked DONE, runs the rest through a
registered backend, then aggregates ``results.parquet``. Backends (``BACKENDS``):

* ``local`` — a pool of spawned worker processes, each with its own thread budget and GPU(s)
  (grpo_bench.suite.local_pool); a cell asking for several GPUs is launched with ``accelerate launch``
  on its slot's GPUs (grpo_bench.suite.accelerate_launch). A cell is locked (flock) while it runs, so a
  killed-and-restarted suite never runs a cell twice at once; the trainer resumes an unfinished cell
  from its last checkpoint (grpo_bench.suite.cell).
* ``submitit`` — each cell is one task of a SLURM job array (submitit's local executor when
  SLURM is absent, which is what the tests use); progress is read from metrics.jsonl
  (grpo_bench.suite.submitit_array).

Safety: one runner per suite folder (``locks.SuiteLock``: a flock on ``.runner.lock``, which names the
holder's pid and host; a second runner refuses with one line; a dead holder's lock is free again).
Ctrl-C (``grpo_bench.interrupt``): the first stops scheduling and lets running cells stop after their
current update at a checkpoint; the second stops at once. A full disk fails the cell with "no space
left on <path>" and stops scheduling. A worker that dies (OOM, signal) fails only its own cell; the
pool is rebuilt for the rest, and a cell that wrote DONE stays done.

The trainer is passed as an import path ``module:function`` so that workers can import it; it is
``grpo_bench.train.trainer:train`` unless a caller (a test) names another. This module imports torch only
inside workers, after the thread and GPU environment is set.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_bench import interrupt
from grpo_bench.atomic import DiskFull, atomic_write_json, atomic_write_text, clean_temp, is_disk_full
from grpo_bench.errors import UserError
from grpo_bench.registry import Registry
from grpo_bench.suite.aggregate import aggregate
from grpo_bench.suite.cell import Outcome
from grpo_bench.suite.local_pool import kill_workers, local_slots, run_local
from grpo_bench.suite.locks import SuiteLock, cell_busy, clean_stale
from grpo_bench.suite.run_folder import CELL, is_done
from grpo_bench.suite.submitit_array import run_submitit

TRAINER = "grpo_bench.train.trainer:train"
Slots = tuple[list[list[int] | None], int]
"""Worker slots (GPU ids of each, None where the backend decides) and threads per worker."""

BACKENDS: Registry[Callable[..., list[Outcome]]] = Registry("backend")
BACKENDS.register("local")(run_local)
BACKENDS.register("submitit")(run_submitit)


def cluster_slots(jobs: int | None, resources: dict[str, Any], cells: int) -> Slots:
    """The cluster's nodes, not this host, decide threads and GPUs; jobs = array parallelism."""
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    return [None] * (jobs or max(1, cells)), resources.get("cpus_per_cell", 1)


SLOTS: dict[str, Callable[[int | None, dict[str, Any], int], Slots]] = {"local": local_slots}
"""How a backend sizes its workers; any backend not named here (submitit, a plug-in) is a cluster's."""


@dataclass
class RunSummary:
    suite_dir: Path
    outcomes: list[Outcome] = field(default_factory=list)
    wall_s: float = 0.0
    aggregate_s: float = 0.0
    startup_s: float = 0.0
    """From the call to the first cell starting in a worker (process spawn, imports, planning)."""
    interrupted: bool = False
    """Ctrl-C stopped the run (nothing was aggregated; rerunning the command resumes)."""
    disk_full: str = ""
    """The "no space left on <path>" message that stopped scheduling, if any."""

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


class _Tap:
    """Forwards events to the display and notes when the first cell started (runner overhead)."""

    def __init__(self, display: Any, t0: float) -> None:
        self.display, self.t0, self.first_start = display, t0, 0.0

    def event(self, event: tuple) -> None:
        if event[0] == "start" and not self.first_start:
            self.first_start = time.perf_counter() - self.t0
        self.display.event(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.display, name)


def run_suite(suite: Any, cells: list[Any], out: Path, *, jobs: int | None = None, backend: str = "local",
              resume: bool = True, trainer: str = TRAINER, display: Any = None, cluster: str | None = None,
              suite_text: str | None = None) -> RunSummary:
    """Run every unfinished cell of ``suite`` under ``out/<name>/`` and aggregate results.parquet.

    Holds the suite folder's lock throughout (a second runner gets a UserError). Ctrl-C: see the
    module docstring; the summary says ``interrupted`` and nothing is aggregated."""
    from grpo_bench.suite.live import NullDisplay

    run_backend = BACKENDS.get(backend, where="--backend: ")
    t0 = time.perf_counter()
    suite_dir = Path(out) / suite.name
    launch = {"launch": suite.resources["accelerate_config"]} if "accelerate_config" in suite.resources else {}
    metas = [{**c.meta(suite.name), **launch} for c in cells]
    # before anything is written: a bad --jobs leaves no folder behind
    slots, threads = SLOTS.get(backend, cluster_slots)(jobs, suite.resources, len(metas))
    with SuiteLock(suite_dir):
        return _run_locked(suite, metas, suite_dir, slots, threads, backend, run_backend, resume, trainer,
                           display or NullDisplay(), cluster, suite_text, t0)


def _run_locked(suite: Any, metas: list[dict[str, Any]], suite_dir: Path, slots: list[list[int] | None],
                threads: int, backend: str, run_backend: Callable[..., list[Outcome]], resume: bool, trainer: str,
                display: Any, cluster: str | None, suite_text: str | None, t0: float) -> RunSummary:
    import multiprocessing as mp

    clean_temp(suite_dir)
    if suite_text is not None:
        atomic_write_text(suite_dir / "suite.yaml", suite_text)
    work = []
    summary = RunSummary(suite_dir)
    for meta in metas:
        cdir = suite_dir / meta["id"]
        if cell_busy(cdir):  # another process (not a runner of this folder) trains it: never touched
            summary.outcomes.append(Outcome(meta["id"], "busy"))
            continue
        if not resume and cdir.exists():
            shutil.rmtree(cdir)
        if is_done(cdir):
            summary.outcomes.append(Outcome(meta["id"], "skipped"))
            continue
        clean_stale(cdir)
        # Rewritten on every start: the id is the same, but the execution fields (device, threads ...) are
        # this invocation's, and a launched cell reads its config from here.
        atomic_write_json(cdir / CELL, meta)
        work.append((meta, cdir))
    slots = slots[: max(1, len(work))]  # never start more workers than cells
    display = _Tap(display, t0)
    display.begin(total=len(metas), done=summary.count("skipped"), jobs=len(slots),
                  updates=[m["config"]["updates"] for m, _ in work])
    stop = mp.get_context("spawn").Event() if backend == "local" else None
    interrupt.reset()
    try:
        with interrupt.first_stops_second_kills(on_first=stop.set if stop is not None else lambda: None,
                                                on_second=kill_workers):
            if work:
                summary.outcomes += run_backend(work, trainer, slots, threads, display, suite_dir=suite_dir,
                                                resources=suite.resources, cluster=cluster, stop=stop)
    finally:
        display.finish()
        summary.interrupted = interrupt.requested() and not any(o.disk_full for o in summary.outcomes)
        interrupt.reset()
    summary.disk_full = next((o.error for o in summary.outcomes if o.disk_full), "")
    summary.startup_s = display.first_start
    if summary.interrupted:  # resumable as is; aggregating now would only report half a suite
        summary.wall_s = time.perf_counter() - t0
        return summary
    t1 = time.perf_counter()
    info = {"name": suite.name, "description": suite.description, "report": suite.report.to_dict(),
            "wall_s": t1 - t0, "jobs": len(slots), "backend": backend, "ran": len(work)}
    try:
        aggregate(suite_dir, metas, info)
        summary.aggregate_s = time.perf_counter() - t1
        summary.wall_s = time.perf_counter() - t0
        atomic_write_json(suite_dir / "runner.json", {
            "wall_s": summary.wall_s, "aggregate_s": summary.aggregate_s, "startup_s": summary.startup_s,
            "jobs": len(slots), "threads": threads,
            "backend": backend, "outcomes": [vars(o) for o in summary.outcomes]})
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        summary.disk_full = str(exc) if isinstance(exc, DiskFull) else str(DiskFull(exc.filename or suite_dir))
    summary.wall_s = time.perf_counter() - t0
    return summary
