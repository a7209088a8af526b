"""``grpo-bench plan SUITE``: per cell the model size, predicted peak GPU and host memory per process
and seconds per update (grpo_bench/train/plan.py), and a one-line refusal (exit 2) when a cell will
not fit ``gpu_memory_gb``; ``grpo-bench run`` calls ``preflight`` first for real-model suites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from grpo_bench.errors import UserError
from grpo_bench.suite.spec import Cell, Suite, expand, load_suite
from grpo_bench.train.config import parse_overrides
from grpo_bench.train.plan import GB, Plan, check_fits, estimate

DEFAULT_TFLOPS = 400.0
"""Sustained bf16 TFLOP/s per GPU assumed for the time estimate (H100/H200 at ~40% of dense peak)."""


def sharding_of(launch: str | None) -> str:
    """'fsdp2', 'deepspeed_zero2' or 'none' from a suite's budget.accelerate_config."""
    if not launch:
        return "none"
    import yaml

    from grpo_bench.train.distributed import config_path

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
            seen[key] = estimate(cell.config, processes=processes, sharding=sharding, tflops=tflops)
        out.append((cell, seen[key]))
    return out


def seconds(x: float) -> str:
    """Seconds as a person reads them: 0.42, 12.3, 1490 (never 1.49e+03)."""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def print_plan(suite: Suite, plans: list[tuple[Cell, Plan]], gpu_memory_gb: float | None, console: Console) -> None:
    """One row per distinct plan (seeds share one): the run's label, its cells, the prediction."""
    first = plans[0][1] if plans else None
    title = f"{suite.name}: {len(plans)} cells" + (
        f", {first.processes} process(es) each, sharding {first.sharding}" if first else "")
    table = Table(title=title)
    for col in ("run", "setting", "cells", "model", "params", "trained", "tokens", "GPU GB", "host GB", "s/update",
                "fits"):
        table.add_column(col)
    rows: dict[tuple[str, str, int], list[Any]] = {}
    for cell, p in plans:
        key = (cell.group, str(cell.config.setting), id(p))
        rows.setdefault(key, [cell, p, 0])[2] += 1
    for (group, setting, _), (_cell, p, n) in rows.items():
        fits = "-" if not gpu_memory_gb else ("yes" if p.gpu_peak <= gpu_memory_gb * GB else "[red]NO[/]")
        table.add_row(group, setting, str(n), p.model, _count(p.params), _count(p.trainable), str(p.tokens),
                      f"{p.gpu_peak / GB:.1f}", f"{p.host_peak / GB:.1f}", seconds(p.seconds_per_update), fits)
    console.print(table)
    for model, p in {p.model: p for _, p in plans}.items():  # the numbers behind every row, unwrapped
        console.print(f"{model}: {_count(p.params)} transformer parameters, {_count(p.trainable)} trained, "
                      f"{p.tokens} tokens per video; worst cell {max(q.gpu_peak for _, q in plans) / GB:.1f} GB GPU, "
                      f"{max(q.host_peak for _, q in plans) / GB:.1f} GB host per process", highlight=False)


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def check(suite: Suite, plans: list[tuple[Cell, Plan]], gpu_memory_gb: float | None) -> None:
    for cell, p in plans:
        check_fits(p, gpu_memory_gb, f"{suite.name}: cell {cell.id}: ")


def plan_command(path: Path, gpu_memory_gb: float | None, tflops: float, overrides: list[str], console: Console) -> int:
    suite = load_suite(path, parse_overrides(overrides))
    memory = gpu_memory_gb or suite.resources.get("gpu_memory_gb")
    plans = plan_cells(suite, expand(suite), tflops)
    print_plan(suite, plans, memory, console)
    check(suite, plans, memory)
    return 0


def preflight(suite: Suite, cells: list[Cell], console: Console) -> None:
    """For suites of real models: refuse (UserError) before any work when a cell will not fit."""
    if all(c.config.model == "world" for c in cells):
        return
    from grpo_bench.train.weights import check_weight_paths

    for c in cells:
        check_weight_paths(c.config, f"{suite.name}: cell {c.id}: ")
    memory = suite.resources.get("gpu_memory_gb")
    try:
        plans = plan_cells(suite, cells)
    except UserError as exc:  # a model plan cannot size (an unknown local folder): say so, do not block
        console.print(f"plan: skipped ({exc})", highlight=False)
        return
    if memory:
        check(suite, plans, memory)
    worst = max(plans, key=lambda cp: cp[1].gpu_peak, default=None)
    if worst is not None:
        console.print(f"plan: peak {worst[1].gpu_peak / GB:.1f} GB GPU and "
                      f"{worst[1].host_peak / GB:.1f} GB host per process "
                      f"(cell {worst[0].id}; `grpo-bench plan` for every cell)")
