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

The trainer is passed as an import path ``module:function`` so that workers can import it; it is
``grpo_bench.train.trainer:train`` unless a caller (a test) names another. This module imports torch only
inside workers, after the thread and GPU environment is set.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import queue as queue_mod
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_bench.registry import Registry
from grpo_bench.suite import results

TRAINER = "grpo_bench.train.trainer:train"
Emit = Callable[[tuple], None]


@dataclass
class Outcome:
    """What happened to one cell in this invocation."""

    cell: str
    status: str
    """done | failed | skipped (DONE before) | busy (locked by another runner)."""
    train_s: float = 0.0
    """Seconds inside the trainer."""
    rows_s: float = 0.0
    """Seconds building the cell's rows of results.parquet."""
    error: str = ""


@dataclass
class RunSummary:
    suite_dir: Path
    outcomes: list[Outcome] = field(default_factory=list)
    wall_s: float = 0.0
    aggregate_s: float = 0.0
    startup_s: float = 0.0
    """From the call to the first cell starting in a worker (process spawn, imports, planning)."""

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
    cdir.mkdir(parents=True, exist_ok=True)
    lock = open(cdir / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return Outcome(meta["id"], "busy")
    try:
        if results.is_done(cdir):  # finished by another runner since we were scheduled
            return Outcome(meta["id"], "skipped")
        (cdir / results.ERROR).unlink(missing_ok=True)
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

                train(RunConfig(**meta["config"]), cdir, resume=True, progress=progress)
        except Exception as exc:  # a failing cell is recorded; the suite goes on
            took = time.perf_counter() - t0
            rec = results.record_failure(cdir, exc, took)
            emit(("end", slot, meta["id"], "failed", took))
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
        lock.close()


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


def _init_worker(slots: Any, events: Any, threads: int) -> None:
    _die_with_parent()
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
    from grpo_bench.errors import UserError

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
              threads: int, display: Any, **_: Any) -> list[Outcome]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    slot_q, events = ctx.Queue(), ctx.Queue()
    for i, gpus in enumerate(slots):
        slot_q.put((i, gpus))
    outcomes: list[Outcome] = []
    with ProcessPoolExecutor(len(slots), mp_context=ctx, initializer=_init_worker,
                             initargs=(slot_q, events, threads)) as pool:
        futures = {pool.submit(_pool_task, meta, str(cdir), trainer): (meta, cdir) for meta, cdir in work}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            _drain(events, display)
            for fut in done:
                meta, cdir = futures[fut]
                try:
                    outcomes.append(fut.result())
                except Exception as exc:  # a worker was killed (BrokenProcessPool: OOM, signal) or rows failed
                    rec = results.record_failure(cdir, exc, 0.0)
                    outcomes.append(Outcome(meta["id"], "failed", error=f"{rec['type']}: {rec['message']}"))
            display.refresh()
        _drain(events, display)
    return outcomes


def _drain(events: Any, display: Any) -> None:
    while True:
        try:
            display.event(events.get_nowait())
        except queue_mod.Empty:
            return


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
    """Run every unfinished cell of ``suite`` under ``out/<name>/`` and aggregate results.parquet."""
    from grpo_bench.suite.live import NullDisplay

    run_backend = BACKENDS.get(backend, where="--backend: ")
    t0 = time.perf_counter()
    suite_dir = Path(out) / suite.name
    suite_dir.mkdir(parents=True, exist_ok=True)
    if suite_text is not None:
        results.atomic_write_text(suite_dir / "suite.yaml", suite_text)
    launch = {"launch": suite.resources["accelerate_config"]} if "accelerate_config" in suite.resources else {}
    metas = [{**c.meta(suite.name), **launch} for c in cells]
    work = []
    summary = RunSummary(suite_dir)
    for meta in metas:
        cdir = suite_dir / meta["id"]
        if not resume and cdir.exists():
            shutil.rmtree(cdir)
        if results.is_done(cdir):
            summary.outcomes.append(Outcome(meta["id"], "skipped"))
            continue
        if not (cdir / results.CELL).is_file():
            results.atomic_write_json(cdir / results.CELL, meta)
        work.append((meta, cdir))
    if backend == "local":
        slots, threads = plan_slots(jobs, suite.resources.get("gpus_per_cell", 1), gpu_count(), os.cpu_count() or 1)
    else:  # the cluster's nodes, not this host, decide threads and GPUs; jobs = array parallelism
        slots, threads = [None] * (jobs or max(1, len(work))), suite.resources.get("cpus_per_cell", 1)
    slots = slots[: max(1, len(work))]  # never start more workers than cells
    display = _Tap(display or NullDisplay(), t0)
    display.begin(total=len(metas), done=summary.count("skipped"), jobs=len(slots),
                  updates=[m["config"]["updates"] for m, _ in work])
    try:
        if work:
            summary.outcomes += run_backend(work, trainer, slots, threads, display, suite_dir=suite_dir,
                                            resources=suite.resources, cluster=cluster)
    finally:
        display.finish()
    t1 = time.perf_counter()
    info = {"name": suite.name, "description": suite.description, "report": suite.report.to_dict(),
            "wall_s": t1 - t0, "jobs": len(slots), "backend": backend, "ran": len(work)}
    results.aggregate(suite_dir, metas, info)
    summary.aggregate_s = time.perf_counter() - t1
    summary.wall_s = time.perf_counter() - t0
    summary.startup_s = display.first_start
    results.atomic_write_json(suite_dir / "runner.json", {
        "wall_s": summary.wall_s, "aggregate_s": summary.aggregate_s, "startup_s": summary.startup_s,
        "jobs": len(slots), "threads": threads,
        "backend": backend, "outcomes": [vars(o) for o in summary.outcomes]})
    return summary


if __name__ == "__main__":
    _main_cell(sys.argv[1:])
