"""``grpo-bench train``, ``run``, ``plan`` and ``ablate``: one GRPO run, or a suite of them.

Only arguments are declared here (registered on the app in ``grpo_bench.cli.entry``); the work lives in
``grpo_bench.cli.train``, ``suite``, ``decide`` and ``plan``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated

import typer

from grpo_bench.cli.terminal import console, interruptible
from grpo_bench.errors import UserError

# options `run` and `ablate` share, declared once so that their help cannot drift apart
JobsOption = Annotated[int | None, typer.Option(
    "--jobs", help="Parallel cells (default: the GPU count, each worker pinned to its GPU; else the core count).")]
CellDeviceOption = Annotated[str | None, typer.Option(
    "--device", help="auto, cpu, cuda or cuda:N for every cell (the same as the override device=...).")]
ResumeCellsOption = Annotated[bool, typer.Option(
    "--resume/--no-resume", metavar="", help="Skip DONE cells, continue partial ones.")]


def _suite_arguments(jobs: int | None, out: Path, device: str | None, overrides: list[str] | None) -> list[str]:
    """`run` and `ablate`: check --jobs and --out before any work; --device becomes the override device=..."""
    from grpo_bench import preflight

    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    preflight.out_dir(out)
    return [*(overrides or []), *([f"device={device}"] if device else [])]


def train(
    method: str | None = typer.Option(
        None, "--method", help="Registered method (method=...; grpo-bench methods); default sage_grpo, or the --like "
        "suite's."),
    kl: str | None = typer.Option(None, "--kl", help="KL trust region (kl=...; grpo-bench methods lists them)."),
    setting: str | None = typer.Option(
        None, "--setting", help="Reward weights (setting=...): A (1,1,1) or B (0.5,0.5,1)."),
    seed: int | None = typer.Option(None, "--seed", help="Run seed (seed=...; prompt order, noise)."),
    updates: int | None = typer.Option(
        None, "--updates", help="Number of GRPO updates (updates=...; default 200; train prints what they will take "
        "before it starts; see the budget below)."),
    lr: float | None = typer.Option(None, "--lr", help="Learning rate (lr=...; default 1e-4)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default: a new folder under runs/train/)."),
    device: str | None = typer.Option(None, "--device", help="device=...: auto, cpu, cuda or cuda:N."),
    resume: bool = typer.Option(
        True, "--resume/--no-resume", metavar="", help="Continue from the folder's latest checkpoint."),
    model: str | None = typer.Option(
        None, "--model", help="Generator (model=...): world, tiny-wan, tiny-hunyuan15, tiny-sd3, tiny-flux, "
        "tiny-qwen-image, a preset, hub id or folder. A named real model (sd3.5-medium, flux.1-dev, wan2.1-14b, ...) "
        "brings its recipe's resolution, guidance, shift, precision and LoRA unless set here or by --like "
        "(grpo_bench/models/recipes.yaml)."
    ),
    accelerate_config: str | None = typer.Option(
        None,
        "--accelerate-config",
        help="Re-launch through `accelerate launch` with a shipped config (single_gpu, multi_gpu, fsdp2, "
        "deepspeed_zero2) or a YAML file.",
    ),
    like: Path | None = typer.Option(
        None, "--like", help="Start from this suite's base config and budget (its cells' lr, warm-up, KL target, "
        "updates, ...); without it train uses RunConfig's defaults, which differ from the suites'."),
    gpu_memory: float | None = typer.Option(
        None, "--gpu-memory", "--gpu-memory-gb", metavar="GB",
        help="Check the run against a GPU of this many GB (default: the free memory of the local GPU; without a GPU "
             "the check is skipped). Before any weight loads, grpo-bench plan's predicted peak per process is held "
             "against it and a run that does not fit is refused (exit 2)."),
    memory_check: bool = typer.Option(
        True, "--memory-check/--no-memory-check", metavar="",
        help="--no-memory-check: run even when plan predicts more GPU memory than the device has."),
    overrides: list[str] | None = typer.Argument(
        None, help="key=value config overrides: any RunConfig key (the --flags above are aliases of the common "
        "ones; docs/cli.md)."),
) -> None:
    """Train one GRPO run: config.yaml, metrics.jsonl, checkpoints, final.json, DONE and the exported policy/.

    train's defaults are RunConfig's (a named real --model: its recipe's), not a suite's: to reproduce a suite cell give --like SUITE with the cell's --method, --kl, --setting and --seed."""  # noqa: E501  (one line: rich would keep the break)
    from grpo_bench import preflight
    from grpo_bench.cli.plan import check_flags
    from grpo_bench.cli.train import build_config, require_real_model_stack, run_train
    from grpo_bench.cli.train_memory import check_train_memory

    if out is not None:
        preflight.out_dir(out)
    check_flags(gpu_memory, 1.0, gpu_flag="--gpu-memory")
    flags = {"method": method, "kl": kl, "setting": setting, "seed": seed, "updates": updates, "lr": lr,
             "device": device, "model": model}
    cfg = build_config(flags, overrides or [], like=like)
    if accelerate_config is not None:
        from grpo_bench.config import accelerate_configs
        from grpo_bench.train import distributed

        accelerate_configs.config_path(accelerate_config)  # a bad name fails here, before any launch
    require_real_model_stack(cfg.model, cfg.reward)
    check_train_memory(cfg, gpu_memory, accelerate_config, memory_check, console)  # before any weight loads
    if accelerate_config is not None and not distributed.launched():
        raise typer.Exit(distributed.relaunch(accelerate_config, sys.argv[1:]))
    code = interruptible(lambda: run_train(cfg, out, resume, console) and 0)
    if code:
        raise typer.Exit(code)


def run(
    suite: Path = typer.Argument(..., help="Suite YAML (e.g. suites/main_table.yaml)."),
    jobs: JobsOption = None,
    backend: str = typer.Option("local", "--backend", help="local (process pool) or submitit (SLURM job array)."),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder; the suite goes to OUT/<suite name>/."),
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="List the cells and their status; run nothing."),
    resume: ResumeCellsOption = True,
    device: CellDeviceOption = None,
    until_decided: bool = typer.Option(
        False, "--until-decided", metavar="",
        help="After the suite's seeds, add seeds in blocks (the suite's decide block: max_seeds, block, alpha) "
             "until every headline comparison of the power table (a factorial suite: its main effects) is decided at "
             "its O'Brien-Fleming level, or "
             "max_seeds is reached; one line per look, the boundary in <suite>/decide.json and the report. "
             "Resumable: rerun to continue."),
    stop_at_look: int | None = typer.Option(
        None, "--stop-at-look", metavar="<int>",
        help="With --until-decided: pause after this look of the plan (a compute budget; the levels stay the "
             "plan's); rerun with --until-decided to continue."),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the suite's base config."),
) -> None:
    """Run every cell of a suite (resumable, parallel), aggregate results.parquet and render the report."""
    from grpo_bench.cli.decide import decide_command
    from grpo_bench.cli.tuning import run_command

    overrides = _suite_arguments(jobs, out, device, overrides)
    if stop_at_look is not None and not until_decided:
        raise UserError("--stop-at-look pauses the looks of --until-decided; add --until-decided")
    command = functools.partial(decide_command, stop_at_look=stop_at_look) if until_decided else run_command
    raise typer.Exit(interruptible(lambda: command(suite, jobs, backend, out, dry_run, resume, overrides, console)))


def tune(
    suite: Path = typer.Argument(..., help="Suite YAML with a tune block (e.g. suites/main_table.yaml)."),
    jobs: JobsOption = None,
    backend: str = typer.Option("local", "--backend", help="local (process pool) or submitit (SLURM job array)."),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder; the grid goes to OUT/<suite name>_tune/."),
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="List the tuning cells; run nothing."),
    resume: ResumeCellsOption = True,
    device: CellDeviceOption = None,
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the suite's base config."),
) -> None:
    """Run a suite's tuning grid (every method alike, on tuning seeds, resumable), choose each method's point by
    the suite's training-side rule and write <suite>_tune/chosen.json, its table and tuning-curve figure.

    `run` does this first by itself; the table then runs each method at its chosen point."""
    from grpo_bench.cli.tuning import tune_command

    overrides = _suite_arguments(jobs, out, device, overrides)
    raise typer.Exit(interruptible(lambda: tune_command(suite, jobs, backend, out, dry_run, resume, overrides,
                                                        console)))


def plan(
    suite: Path = typer.Argument(..., help="Suite YAML (e.g. suites/hunyuan15_paper.yaml)."),
    gpu_memory_gb: float | None = typer.Option(
        None, "--gpu-memory-gb",
        help="GPU memory per device (default: the suite's budget.gpu_memory_gb, else the local GPU, else 141 "
             "GB); a cell predicted above it is refused (exit 2)."),
    tflops: float = typer.Option(400.0, "--tflops", help="Sustained TFLOP/s per GPU for the time estimate."),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the suite's base config."),
) -> None:
    """Predict per cell the model size, peak GPU and host memory per process, time per update and per cell,
    the suite's GPU-hours, and whether every cell fits (exit 2 when one does not)."""
    from grpo_bench.cli.plan import plan_command

    raise typer.Exit(plan_command(suite, gpu_memory_gb, tflops, overrides or [], console))


def ablate(
    kl: str | None = typer.Option(None, "--kl", help="'all' or a comma list of KL variants."),
    equalizer: str | None = typer.Option(None, "--equalizer", help="Comma list of on/off, e.g. on,off."),
    sde: str | None = typer.Option(
        None, "--sde", help="Comma list of registered methods or their kernels (`grpo-bench methods`)."
    ),
    base: Path | None = typer.Option(
        None, "--base", help="Suite giving base config, budget, seeds (default suites/ablate_kl.yaml)."
    ),
    jobs: JobsOption = None,
    backend: str = typer.Option("local", "--backend", help="local or submitit."),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder."),
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="List the cells; run nothing."),
    resume: ResumeCellsOption = True,
    device: CellDeviceOption = None,
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the base config."),
) -> None:
    """Build an ablation grid (KL variant x equalizer x SDE) on a base suite and run it like `run`."""
    from grpo_bench.cli.suite import ablate_command

    overrides = _suite_arguments(jobs, out, device, overrides)
    raise typer.Exit(interruptible(lambda: ablate_command(kl, equalizer, sde, base, jobs, backend, out, dry_run,
                                                          resume, overrides, console)))


def restore(
    stored: Path = typer.Argument(..., help="A stored results table (reports/<suite>, or its results.parquet)."),
    folder: Path = typer.Argument(..., help="The run folder to seed (e.g. runs/main_table_tune)."),
) -> None:
    """Seed a run folder with the finished cells of a stored results table, so that `run` and `tune` skip them
    and resume the rest (a tuning grid stopped in an earlier session, cells another suite already ran)."""
    from grpo_bench import preflight
    from grpo_bench.suite.restore import restore_cells

    if not stored.exists():
        raise UserError(f"{stored}: not found; give a stored report folder or its results.parquet")
    preflight.out_dir(folder)
    restored, kept = restore_cells(stored, folder)
    console.print(f"restore: {len(restored)} finished cells into {folder}"
                  + (f" ({len(kept)} already there, kept)" if kept else ""), markup=False, highlight=False)
