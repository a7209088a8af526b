"""Running a suite's cells: resumable, in parallel, one failure never stops the others.

``run_suite`` writes each cell's ``cell.json``, skips cells marked DONE, runs the rest through a
registered backend, then aggregates ``results.parquet``. Backends:

* ``local`` — a pool of spawned worker processes. Each worker owns a slot: a thread budget
  (cores // jobs, set before torch is imported) and, on a GPU machine, its own GPU(s) through
  CUDA_VISIBLE_DEVICES. A cell asking for several GPUs (budget.gpus_per_cell) is launched with
  ``accelerate launch`` on its slot's GPUs. Workers die with the runner (PR_SET_PDEATHSIG), and a
  cell is locked (flock) while it runs, so a killed-and-restarted suite never runs a cell twice at
  once; the trainer resumes an unfinished cell from its last checkpoint.
* ``submitit`` — each cell is one task of a SLURM job array (submitit's local executor when
  SLURM is absent, which is what the tests use); progress is read from metrics.jsonl.

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

import importlib
import os
import queue as queue_mod
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_bench import interrupt
from grpo_bench.atomic import DiskFull, clean_temp, is_disk_full
from grpo_bench.errors import UserError
from grpo_bench.registry import Registry
from grpo_bench.suite import results
from grpo_bench.suite.locks import SuiteLock, _release, _try_flock, cell_busy, clean_stale

__all__ = ["SuiteLock", "cell_busy", "clean_stale", "run_cell", "run_suite"]

TRAINER = "grpo_bench.train.trainer:train"
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


def load_trainer(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# --- one cell (runs inside a worker) ----------------------------------------------------------
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
        if results.is_done(cdir):  # finished by another runner since we were scheduled
            return Outcome(meta["id"], "skipped")
        (cdir / results.ERROR).unlink(missing_ok=True)
        _record_attempt(cdir)
        total = meta["config"]["updates"]
        emit(("start", slot, meta["id"], meta["group"], meta["labels"].get("seed"), total))
        t0 = time.perf_counter()
        try:
            if gpus is not None and len(gpus) > 1:
                _launch_accelerate(cdir, trainer, gpus, lambda u: emit(("update", slot, meta["id"], u, total, None)),
                                   meta.get("launch"))
            else:
                from grpo_bench.train.config import RunConfig

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
            rec = results.record_failure(cdir, exc, took)
            emit(("end", slot, meta["id"], "failed", took))
            if is_disk_full(exc):
                return Outcome(meta["id"], "failed", took, error=str(DiskFull(getattr(exc, "path", None) or
                                                                               getattr(exc, "filename", None) or cdir)),
                               disk_full=True)
            return Outcome(meta["id"], "failed", took, error=f"{rec['type']}: {rec['message']}")
        took = time.perf_counter() - t0
        t1 = time.perf_counter()
        results.write_cell_rows(cdir, meta, wall_time=took)
        if not results.is_done(cdir):
            results.mark_done(cdir)
        rows_s = time.perf_counter() - t1
        emit(("end", slot, meta["id"], "done", took))
        return Outcome(meta["id"], "done", took, rows_s)
    finally:
        _release(lock, cdir / ".lock")


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


def _launch_accelerate(cdir: Path, trainer: str, gpus: list[int], on_update: Callable[[int], None],
                       launch: str | None = None) -> None:
    """Multi-GPU cell: ``accelerate launch`` this module on the slot's GPUs (budget.accelerate_config, default
    plain data parallel); progress from metrics.jsonl; a failure is one line (first rank's error, log path)."""
    from grpo_bench.train.distributed import config_path, launch_failure

    how = ["--config_file", str(config_path(launch))] if launch else ["--multi_gpu"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *how, "--num_processes", str(len(gpus)),
           "-m", "grpo_bench.suite.runner", str(cdir), trainer]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    with open(cdir / "launch.log", "a") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        while proc.poll() is None:
            time.sleep(2.0)
            on_update(len(results.read_jsonl(cdir / "metrics.jsonl")))
    if proc.returncode != 0:
        raise launch_failure(proc.returncode, cdir / "launch.log")


def _main_cell(argv: list[str]) -> None:
    """Entry of ``python -m grpo_bench.suite.runner CELL_DIR TRAINER`` (one process per GPU under accelerate)."""
    import json

    from grpo_bench.train.config import RunConfig

    cdir, trainer = Path(argv[0]), argv[1]
    meta = json.loads((cdir / results.CELL).read_text())
    load_trainer(trainer)(RunConfig(**meta["config"]), cdir, resume=True)


# --- worker processes ------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the runner dies, so an orphan never finishes a cell twice."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _init_worker(slots: Any, events: Any, threads: int, stop: Any = None) -> None:
    _die_with_parent()
    # Ctrl-C reaches a worker through the runner's stop event (at a safe point), never as a signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if stop is not None:
        interrupt.attach(stop)
    slot, gpus = slots.get()
    _WORKER.update(slot=slot, gpus=gpus, events=events)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    import torch

    torch.set_num_threads(threads)


def _pool_task(meta: dict[str, Any], cell_dir: str, trainer: str) -> Outcome:
    w = _WORKER
    w["events"].put(("worker", meta["id"], os.getpid()))  # which process runs the cell (a dead worker's cell)
    return run_cell(meta, cell_dir, trainer, w["events"].put, w["slot"], w["gpus"])


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a CPU-only build without CUDA support
        return 0


def plan_slots(jobs: int | None, gpus_per_cell: int, n_gpus: int, cpus: int) -> tuple[list[list[int] | None], int]:
    """Worker slots (GPU ids of each, None on CPU) and threads per worker.

    GPUs: jobs defaults to n_gpus // gpus_per_cell and each slot owns distinct GPUs. CPUs: jobs
    defaults to the core count; each worker gets cores // jobs threads (at least one).
    """
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    if n_gpus > 0:
        most = n_gpus // gpus_per_cell
        if most < 1:
            raise UserError(f"budget.gpus_per_cell = {gpus_per_cell} but this machine has {n_gpus} GPU(s)")
        jobs = most if jobs is None else jobs
        if jobs > most:
            raise UserError(f"--jobs {jobs}: only {most} worker(s) fit on {n_gpus} GPU(s) at "
                            f"{gpus_per_cell} GPU(s) per cell")
        slots = [list(range(i * gpus_per_cell, (i + 1) * gpus_per_cell)) for i in range(jobs)]
    else:
        jobs = cpus if jobs is None else jobs
        slots = [None] * jobs
    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    return slots, max(1, cpus // jobs)


# --- backends -------------------------------------------------------------------------------------
BACKENDS: Registry[Callable[..., list[Outcome]]] = Registry("backend")


@BACKENDS.register("local")
def run_local(work: list[tuple[dict[str, Any], Path]], trainer: str, slots: list[list[int] | None],
              threads: int, display: Any, stop: Any = None, **_: Any) -> list[Outcome]:
    """Run ``work`` on a process pool; a pool broken by a dead worker is rebuilt for the cells left."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    stop = stop if stop is not None else ctx.Event()
    outcomes: dict[str, Outcome] = {}
    queue = list(work)
    for _ in range(len(work) + 1):  # every rebuild settles at least the dead worker's cell
        if not queue or stop.is_set():
            break
        queue = _one_pool(queue, trainer, slots, threads, display, stop, ctx, outcomes)
    for meta, _cdir in work:  # cancelled or never submitted after Ctrl-C or a full disk
        outcomes.setdefault(meta["id"], Outcome(meta["id"], "interrupted"))
    return [outcomes[meta["id"]] for meta, _ in work]


_POOLS: list[Any] = []
"""Live pools, so a second Ctrl-C can kill their workers at once."""


def kill_workers() -> None:
    for pool in list(_POOLS):
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()


def _one_pool(queue: list[tuple[dict[str, Any], Path]], trainer: str, slots: list[list[int] | None], threads: int,
              display: Any, stop: Any, ctx: Any, outcomes: dict[str, Outcome]) -> list[tuple[dict[str, Any], Path]]:
    """One pool over ``queue``; fills ``outcomes``; returns the cells to retry if the pool broke."""
    slot_q, events = ctx.Queue(), ctx.Queue()
    for i, gpus in enumerate(slots):
        slot_q.put((i, gpus))
    owner: dict[int, str] = {}  # worker pid -> the cell it runs
    procs: dict[int, Any] = {}
    retry: list[tuple[dict[str, Any], Path]] = []
    with ProcessPoolExecutor(len(slots), mp_context=ctx, initializer=_init_worker,
                             initargs=(slot_q, events, threads, stop)) as pool:
        _POOLS.append(pool)
        try:
            futures = {pool.submit(_pool_task, meta, str(cdir), trainer): (meta, cdir) for meta, cdir in queue}
            pending = set(futures)
            broken = False
            while pending:
                procs.update(getattr(pool, "_processes", None) or {})
                done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                _drain(events, display, owner)
                if stop.is_set():  # Ctrl-C or a full disk: start nothing new
                    for fut in list(pending):
                        if fut.cancel():
                            pending.discard(fut)
                for fut in done:
                    if fut.cancelled():
                        continue
                    meta, cdir = futures[fut]
                    try:
                        out = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        retry.append((meta, cdir))
                        continue
                    except Exception as exc:  # rows failed after training
                        rec = results.record_failure(cdir, exc, 0.0)
                        out = Outcome(meta["id"], "failed", error=f"{rec['type']}: {rec['message']}")
                    outcomes[meta["id"]] = out
                    if out.disk_full:
                        stop.set()
                display.refresh()
            _drain(events, display, owner)
        finally:
            _POOLS.remove(pool)
    if not broken:
        return []
    # A worker died: its own cell fails; every other cell it took down is retried in a new pool.
    dead = {owner[pid] for pid, proc in procs.items()
            if pid in owner and proc.exitcode not in (None, 0, -signal.SIGTERM)}
    culprits = dead or {cell for cell in owner.values() if cell not in outcomes}  # unknown: the running ones
    again = []
    for meta, cdir in retry:
        if results.is_done(cdir):  # DONE wins: it finished before the pool broke
            outcomes[meta["id"]] = Outcome(meta["id"], "done")
        elif meta["id"] in culprits:
            code = next((p.exitcode for pid, p in procs.items() if owner.get(pid) == meta["id"]), None)
            exc = RuntimeError(f"the worker running this cell died (exit code {code}: killed by a signal, "
                               "e.g. out of memory); the other cells went on")
            rec = results.record_failure(cdir, exc, 0.0)
            outcomes[meta["id"]] = Outcome(meta["id"], "failed", error=f"{rec['type']}: {rec['message']}")
        else:
            again.append((meta, cdir))
    return again


def _drain(events: Any, display: Any, owner: dict[int, str] | None = None) -> None:
    while True:
        try:
            event = events.get_nowait()
        except (queue_mod.Empty, OSError, EOFError):
            return
        if event[0] == "worker":
            if owner is not None:
                owner[event[2]] = event[1]
            continue
        display.event(event)


def _submitit_task(meta: dict[str, Any], cell_dir: str, trainer: str, threads: int) -> Outcome:
    import torch

    torch.set_num_threads(threads)
    return run_cell(meta, cell_dir, trainer, lambda event: None)


@BACKENDS.register("submitit")
def run_submitit(work: list[tuple[dict[str, Any], Path]], trainer: str, slots: list[list[int] | None],
                 threads: int, display: Any, suite_dir: Path, resources: dict[str, int],
                 cluster: str | None = None, **_: Any) -> list[Outcome]:
    """One SLURM array task per cell (at most len(slots) at once); progress polled from the files."""
    import submitit

    executor = submitit.AutoExecutor(folder=suite_dir / ".submitit", cluster=cluster)
    executor.update_parameters(timeout_min=resources.get("timeout_min", 24 * 60),
                               gpus_per_node=resources.get("gpus_per_cell", 0), cpus_per_task=threads,
                               slurm_array_parallelism=len(slots), name=f"grpo-bench-{suite_dir.name}")
    metas = [m for m, _ in work]
    jobs = executor.map_array(_submitit_task, metas, [str(c) for _, c in work], [trainer] * len(work),
                              [threads] * len(work))
    outcomes: dict[int, Outcome] = {}
    started: set[int] = set()
    while len(outcomes) < len(jobs):
        if interrupt.requested():  # Ctrl-C: stop waiting; the scheduler's jobs are cancelled
            for i, (job, (meta, _)) in enumerate(zip(jobs, work)):
                if i not in outcomes:
                    job.cancel(check=False)
                    outcomes[i] = Outcome(meta["id"], "interrupted")
            break
        for i, (job, (meta, cdir)) in enumerate(zip(jobs, work)):
            if i in outcomes:
                continue
            lines = len(results.read_jsonl(cdir / "metrics.jsonl"))
            if i not in started and (lines or job.state in ("RUNNING", "COMPLETED", "FINISHED")):
                started.add(i)
                display.event(("start", i, meta["id"], meta["group"], meta["labels"].get("seed"),
                               meta["config"]["updates"]))
            if i in started:
                display.event(("update", i, meta["id"], lines, meta["config"]["updates"], None))
            if job.done():
                try:
                    outcomes[i] = job.result()
                except Exception as exc:  # the job itself died (timeout, pre-emption, node failure)
                    rec = results.record_failure(cdir, exc, 0.0)
                    outcomes[i] = Outcome(meta["id"], "failed", error=f"{rec['type']}: {rec['message']}")
                display.event(("end", i, meta["id"], outcomes[i].status, outcomes[i].train_s))
        display.refresh()
        time.sleep(0.5)
    return [outcomes[i] for i in range(len(jobs))]


# --- the suite ---------------------------------------------------------------------------------------
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
    if backend == "local":  # before anything is written: a bad --jobs leaves no folder behind
        slots, threads = plan_slots(jobs, suite.resources.get("gpus_per_cell", 1), gpu_count(), os.cpu_count() or 1)
    else:  # the cluster's nodes, not this host, decide threads and GPUs; jobs = array parallelism
        if jobs is not None and jobs < 1:
            raise UserError(f"--jobs must be >= 1, got {jobs}")
        slots, threads = [None] * (jobs or max(1, len(metas))), suite.resources.get("cpus_per_cell", 1)
    with SuiteLock(suite_dir):
        return _run_locked(suite, metas, suite_dir, slots, threads, backend, run_backend, resume, trainer,
                           display or NullDisplay(), cluster, suite_text, t0)


def _run_locked(suite: Any, metas: list[dict[str, Any]], suite_dir: Path, slots: list[list[int] | None],
                threads: int, backend: str, run_backend: Callable[..., list[Outcome]], resume: bool, trainer: str,
                display: Any, cluster: str | None, suite_text: str | None, t0: float) -> RunSummary:
    import multiprocessing as mp

    clean_temp(suite_dir)
    if suite_text is not None:
        results.atomic_write_text(suite_dir / "suite.yaml", suite_text)
    work = []
    summary = RunSummary(suite_dir)
    for meta in metas:
        cdir = suite_dir / meta["id"]
        if cell_busy(cdir):  # another process (not a runner of this folder) trains it: never touched
            summary.outcomes.append(Outcome(meta["id"], "busy"))
            continue
        if not resume and cdir.exists():
            shutil.rmtree(cdir)
        if results.is_done(cdir):
            summary.outcomes.append(Outcome(meta["id"], "skipped"))
            continue
        clean_stale(cdir)
        # Rewritten on every start: the id is the same, but the execution fields (device, threads ...) are
        # this invocation's, and a launched cell reads its config from here.
        results.atomic_write_json(cdir / results.CELL, meta)
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
        results.aggregate(suite_dir, metas, info)
        summary.aggregate_s = time.perf_counter() - t1
        summary.wall_s = time.perf_counter() - t0
        results.atomic_write_json(suite_dir / "runner.json", {
            "wall_s": summary.wall_s, "aggregate_s": summary.aggregate_s, "startup_s": summary.startup_s,
            "jobs": len(slots), "threads": threads,
            "backend": backend, "outcomes": [vars(o) for o in summary.outcomes]})
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        summary.disk_full = str(exc) if isinstance(exc, DiskFull) else str(DiskFull(exc.filename or suite_dir))
    summary.wall_s = time.perf_counter() - t0
    return summary


if __name__ == "__main__":
    _main_cell(sys.argv[1:])
