"""The ``local`` backend: a pool of spawned worker processes on this machine.

Each worker owns a slot: a thread budget (cores // jobs, set before torch is imported) and, on a GPU
machine, its own GPU(s) through CUDA_VISIBLE_DEVICES. A cell asking for several GPUs
(budget.gpus_per_cell) is launched with ``accelerate launch`` on its slot's GPUs. Workers die with
the runner (PR_SET_PDEATHSIG). A worker that dies (OOM, signal) fails only its own cell; the pool is
rebuilt for the rest, and a cell that wrote DONE stays done. Ctrl-C reaches a worker through the
runner's stop event, at a safe point, never as a signal.
"""

from __future__ import annotations

import os
import queue as queue_mod
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from grpo_bench import interrupt
from grpo_bench.errors import UserError
from grpo_bench.suite.cell import Outcome, failed, run_cell
from grpo_bench.suite.children import die_with_parent
from grpo_bench.suite.run_folder import is_done

_WORKER: dict[str, Any] = {}


def _init_worker(slots: Any, events: Any, threads: int, stop: Any = None) -> None:
    die_with_parent()
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


def local_slots(jobs: int | None, resources: dict[str, Any], cells: int) -> tuple[list[list[int] | None], int]:
    """This machine's slots: its cores and GPUs (``plan_slots``)."""
    return plan_slots(jobs, resources.get("gpus_per_cell", 1), gpu_count(), os.cpu_count() or 1)


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
                        out = failed(meta, cdir, exc)
                    outcomes[meta["id"]] = out
                    if out.disk_full:
                        stop.set()
                display.refresh()
            _drain(events, display, owner)
        finally:
            _POOLS.remove(pool)
    # A result can overtake the events its worker put before returning (each queue has its own feeder thread, and
    # a loaded machine starves them): the workers have exited now, which flushed their events, so read the rest.
    _drain(events, display, owner)
    if not broken:
        return []
    # A worker died: its own cell fails; every other cell it took down is retried in a new pool.
    dead = {owner[pid] for pid, proc in procs.items()
            if pid in owner and proc.exitcode not in (None, 0, -signal.SIGTERM)}
    culprits = dead or {cell for cell in owner.values() if cell not in outcomes}  # unknown: the running ones
    again = []
    for meta, cdir in retry:
        if is_done(cdir):  # DONE wins: it finished before the pool broke
            outcomes[meta["id"]] = Outcome(meta["id"], "done")
        elif meta["id"] in culprits:
            code = next((p.exitcode for pid, p in procs.items() if owner.get(pid) == meta["id"]), None)
            exc = RuntimeError(f"the worker running this cell died (exit code {code}: killed by a signal, "
                               "e.g. out of memory); the other cells went on")
            outcomes[meta["id"]] = failed(meta, cdir, exc)
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
