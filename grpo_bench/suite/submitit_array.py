"""The ``submitit`` backend: each cell is one task of a SLURM job array.

submitit's local executor runs the array when SLURM is absent (which is what the tests use); at most
``--jobs`` tasks run at once, and progress is polled from each cell's metrics.jsonl. Ctrl-C stops
waiting and cancels the scheduler's jobs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from grpo_bench import interrupt
from grpo_bench.atomic import read_jsonl
from grpo_bench.suite.cell import Outcome, failed, run_cell


def _submitit_task(meta: dict[str, Any], cell_dir: str, trainer: str, threads: int) -> Outcome:
    import torch

    torch.set_num_threads(threads)
    return run_cell(meta, cell_dir, trainer, lambda event: None)


def run_submitit(work: list[tuple[dict[str, Any], Path]], trainer: str, slots: list[list[int] | None],
                 threads: int, display: Any, suite_dir: Path, resources: dict[str, int],
                 cluster: str | None = None, **_: Any) -> list[Outcome]:
    """One SLURM array task per cell (at most len(slots) at once); a cell whose job died (its time limit,
    pre-emption) is submitted again up to ``budget.requeue`` times, resuming from its last checkpoint."""
    outcomes = _submit_round(work, trainer, slots, threads, display, suite_dir, resources, cluster)
    for _ in range(int(resources.get("requeue", 0))):
        again = [i for i, o in enumerate(outcomes) if o.status == "failed" and o.error.startswith(DIED)]
        if not again or interrupt.requested():
            break
        for i, o in zip(again, _submit_round([work[i] for i in again], trainer, slots, threads, display, suite_dir,
                                             resources, cluster)):
            outcomes[i] = o
    return outcomes


DIED = "job died: "
"""Prefix of the error of a cell whose scheduler job ended without a result (requeued when allowed)."""


def _submit_round(work: list[tuple[dict[str, Any], Path]], trainer: str, slots: list[list[int] | None],
                  threads: int, display: Any, suite_dir: Path, resources: dict[str, int],
                  cluster: str | None) -> list[Outcome]:
    import dataclasses

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
            lines = len(read_jsonl(cdir / "metrics.jsonl"))
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
                    outcome = failed(meta, cdir, exc)
                    outcomes[i] = dataclasses.replace(outcome, error=DIED + (outcome.error or ""))
                display.event(("end", i, meta["id"], outcomes[i].status, outcomes[i].train_s))
        display.refresh()
        time.sleep(0.5)
    return [outcomes[i] for i in range(len(jobs))]
