"""``grpo-bench plan SUITE``: per cell the model size, predicted peak GPU and host memory per process,
time per update and per cell, the suite's total in GPU-hours and node-days (grpo_bench/plan/estimate.py),
and whether it fits: every cell is checked against one GPU size (``--gpu-memory-gb``, else the suite's
``budget.gpu_memory_gb``, else the local GPU, else ``DEFAULT_GPU_GB``, the largest current data-centre
GPU) and a cell that does not fit is refused in one line (exit 2). ``grpo-bench run`` calls
``preflight`` first for real-model suites."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from grpo_bench.config.run import parse_overrides, section
from grpo_bench.errors import UserError
from grpo_bench.plan.estimate import GB, Plan, check_fits, check_time, estimate
from grpo_bench.plan.inputs import PlanInputs
from grpo_bench.report.suite_parts import load_suite_checked
from grpo_bench.suite.expand import expand
from grpo_bench.suite.spec import Cell, Suite

DEFAULT_TFLOPS = 400.0
"""Sustained bf16 TFLOP/s per GPU assumed for the time estimate (H100/H200 at ~40% of dense peak)."""
DEFAULT_GPU_GB = 141.0
"""What "fits" means when neither the command, the suite nor a local GPU says: an H200's 141 GB."""
NODE_GPUS = 8
"""GPUs per node for the node-days total."""


def gpu_memory(declared: float | None, suite: Suite) -> tuple[float, str]:
    """(GB per GPU to check against, where that number comes from)."""
    if declared:
        return float(declared), "--gpu-memory-gb"
    if suite.resources.get("gpu_memory_gb"):
        return float(suite.resources["gpu_memory_gb"]), "the suite's budget.gpu_memory_gb"
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return props.total_memory / GB, f"the local GPU ({props.name})"
    return DEFAULT_GPU_GB, f"no GPU declared or visible: {DEFAULT_GPU_GB:g} GB, an H200"


def duration(seconds: float) -> str:
    """Seconds as a readable duration: '45 s', '12.5 min', '7.4 h', '4.3 days'."""
    if seconds < 120:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def sharding_of(launch: str | None) -> str:
    """'fsdp2', 'deepspeed_zero2' or 'none' from a suite's budget.accelerate_config."""
    if not launch:
        return "none"
    import yaml

    from grpo_bench.config.accelerate_configs import config_path

    kind = str((yaml.safe_load(config_path(launch).read_text()) or {}).get("distributed_type", "")).upper()
    return {"FSDP": "fsdp2", "DEEPSPEED": "deepspeed_zero2"}.get(kind, "none")


def plan_cells(suite: Suite, cells: list[Cell], tflops: float = DEFAULT_TFLOPS) -> list[tuple[Cell, Plan]]:
    processes = int(suite.resources.get("gpus_per_cell", 1))
    sharding = sharding_of(suite.resources.get("accelerate_config"))
    seen: dict[str, Plan] = {}
    out = []
    for cell in cells:
        key = repr(sorted((k, str(v)) for k, v in cell.config.to_dict().items() if k != "seed"))
        if key not in seen:  # seeds share a plan
            inputs = section(cell.config, PlanInputs)  # a cell's config is resolved (suite/expand.py)
            seen[key] = estimate(inputs, processes=processes, sharding=sharding, tflops=tflops)
        out.append((cell, seen[key]))
    return out


@dataclass(frozen=True)
class SuiteTotals:
    """What a suite's plans add up to (seeds counted as the cells they are)."""

    cells: int
    processes: int
    longest_cell_s: float
    gpu_hours: float
    serial_s: float
    """All cells one at a time on ``processes`` GPUs."""

    @property
    def node_days(self) -> float:
        return self.gpu_hours / NODE_GPUS / 24


def suite_totals(plans: list[tuple[Cell, Plan]]) -> SuiteTotals:
    cell_s = [p.seconds_per_cell for _, p in plans]
    gpu_h = sum(s * p.processes for s, (_, p) in zip(cell_s, plans)) / 3600
    return SuiteTotals(len(plans), max(p.processes for _, p in plans), max(cell_s), gpu_h, sum(cell_s))


def print_plan(suite: Suite, plans: list[tuple[Cell, Plan]], gpu_memory_gb: float | None, console: Console,
               source: str = "") -> None:
    """One row per distinct plan (seeds share one): the run's label, its cells, the prediction, whether it
    fits; then the totals per suite."""
    first = plans[0][1] if plans else None
    title = f"{suite.name}: {len(plans)} cells" + (
        f", {first.processes} process(es) each, sharding {first.sharding}" if first else "")
    table = Table(title=title)
    for col in ("run", "setting", "cells", "model", "params", "trained", "tokens", "GPU GB", "host GB", "per update",
                "per cell", "fits"):
        table.add_column(col)
    rows: dict[tuple[str, str, int], list[Any]] = {}
    for cell, p in plans:
        key = (cell.group, str(cell.config.setting), id(p))
        rows.setdefault(key, [cell, p, 0])[2] += 1
    for (group, setting, _), (_cell, p, n) in rows.items():
        fits = "-" if not gpu_memory_gb else ("yes" if p.gpu_peak <= gpu_memory_gb * GB else "[red]NO[/]")
        table.add_row(group, setting, str(n), p.model, _count(p.params), _count(p.trainable), f"{p.tokens:,}",
                      f"{p.gpu_peak / GB:.1f}", f"{p.host_peak / GB:.1f}", duration(p.seconds_per_update),
                      duration(p.seconds_per_cell), fits)
    console.print(table)
    for model, p in {p.model: p for _, p in plans}.items():  # the numbers behind every row, unwrapped
        console.print(f"{model}: {_count(p.params)} transformer parameters, {_count(p.trainable)} trained, "
                      f"{p.tokens:,} tokens per video; worst cell {max(q.gpu_peak for _, q in plans) / GB:.1f} GB GPU, "
                      f"{max(q.host_peak for _, q in plans) / GB:.1f} GB host per process", highlight=False)
    if plans:
        t = suite_totals(plans)
        console.print(f"total: {t.cells} cells, longest {duration(t.longest_cell_s)}; {t.gpu_hours:,.0f} GPU-hours = "
                      f"{t.node_days:,.1f} node-days of {NODE_GPUS} GPUs ({duration(t.serial_s)} one cell "
                      f"at a time on {t.processes} GPU(s))", highlight=False)
    if gpu_memory_gb:
        console.print(f"fits: checked against {gpu_memory_gb:.0f} GB per GPU ({source})", highlight=False)


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def check(suite: Suite, plans: list[tuple[Cell, Plan]], gpu_memory_gb: float | None) -> None:
    """Every cell fits its GPU, finishes within its time limit (with the declared requeues) and has a
    schedule its processes can carry (config/recipe.py); else one line (exit 2)."""
    from grpo_bench.config import recipe
    from grpo_bench.config.sections import section

    timeout, requeue = suite.resources.get("timeout_min"), int(suite.resources.get("requeue", 0))
    for cell, p in plans:
        where = f"{suite.name}: cell {cell.id}: "
        recipe.check(section(cell.config, recipe.UpdateShape), p.processes, where)
        check_fits(p, gpu_memory_gb, where)
        check_time(p, timeout, requeue, cell.config.checkpoint_every, where)


def check_flags(gpu_memory_gb: float | None, tflops: float, gpu_flag: str = "--gpu-memory-gb") -> None:
    """--tflops and --gpu-memory-gb (train: ``gpu_flag`` --gpu-memory) are positive finite numbers (0 would divide
    by zero, nan print "nan days")."""
    import math

    for flag, value in (("--tflops", tflops), (gpu_flag, gpu_memory_gb)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"{flag} must be a finite number > 0, got {value!r}")


def plan_command(path: Path, gpu_memory_gb: float | None, tflops: float, overrides: list[str], console: Console) -> int:
    check_flags(gpu_memory_gb, tflops)
    suite = load_suite_checked(path, parse_overrides(overrides))
    memory, source = gpu_memory(gpu_memory_gb, suite)
    plans = plan_cells(suite, expand(suite), tflops)
    print_plan(suite, plans, memory, console, source)
    check(suite, plans, memory)
    return 0


def preflight(suite: Suite, cells: list[Cell], console: Console) -> None:
    """For suites of real models: refuse (UserError) before any work when a cell will not fit."""
    from grpo_bench.world.roles import video_world

    if all(c.config.model == video_world().model for c in cells):  # the embedded world fits anywhere
        return
    from grpo_bench.config.sections import Compared, section
    from grpo_bench.config.weights import check_weight_paths

    for c in cells:
        check_weight_paths(section(c.config, Compared), f"{suite.name}: cell {c.id}: ")
    memory, _ = gpu_memory(None, suite)
    try:
        plans = plan_cells(suite, cells)
    except UserError as exc:  # a model plan cannot size (an unknown local folder): say so, do not block
        console.print(f"plan: skipped ({exc})", highlight=False)
        return
    check(suite, plans, memory)
    worst = max(plans, key=lambda cp: cp[1].gpu_peak, default=None)
    if worst is not None:
        console.print(f"plan: peak {worst[1].gpu_peak / GB:.1f} GB GPU and "
                      f"{worst[1].host_peak / GB:.1f} GB host per process, {duration(worst[1].seconds_per_cell)} "
                      f"(cell {worst[0].id}; `grpo-bench plan` for every cell)", highlight=False)
