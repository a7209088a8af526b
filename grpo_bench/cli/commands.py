"""The ``grpo-bench`` command line (docs/design.md §6).

Each command's work lives in its own module; this file only declares arguments. A user mistake
(UserError) prints one line and exits with code 2, never a traceback.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import typer
from rich.console import Console

from grpo_bench.cli.train_cost import BUDGET_HELP as TRAIN_BUDGET_HELP
from grpo_bench.errors import UserError
from grpo_bench.study.cli import study_app

app = typer.Typer(
    name="grpo-bench",
    help="Benchmark and ablation harness for GRPO-style RL of flow-matching video generators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
def _console(stderr: bool = False) -> Console:
    """A terminal gets its own width; a pipe or file gets wide lines instead of rich's 80 columns,
    so tables (``sample`` scores, ``methods`` headers) are never cut."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=200 if wide else None)


console = _console()
err_console = Console(stderr=True)


@app.command()
def methods() -> None:
    """List registered methods with their kernels and defaults, and the KL variants."""
    from grpo_bench.report.methods_table import print_methods

    print_methods(console)


@app.command()
def samplers(
    steps: int = typer.Option(10, "--steps", help="Sampler steps T."),
    shift: float = typer.Option(3.0, "--shift", help="Schedule shift."),
    data_std: float = typer.Option(0.5, "--data-std", help="Std s of the Gaussian data N(0, s^2 I)."),
    out: Path = typer.Option(
        Path("runs/samplers"), "--out",
        help="Folder for Table 1 and Figure 1 (reports/samplers holds the committed reference)."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write per-step std and variance errors as JSON."),
    noise_level: float | None = typer.Option(
        None, "--noise-level", help="Put every kernel at this noise level (eta or a) for a matched comparison; "
        "default: each method's own level."),
) -> None:
    """Table 1 / Figure 1: noise each kernel injects, and its marginal-variance error (exact Gaussian model)."""
    from grpo_bench import preflight
    from grpo_bench.report.samplers import run_samplers_report

    _bounded("--steps", steps, 1, MAX_SAMPLER_STEPS)
    for flag, value in (("--shift", shift), ("--data-std", data_std)):
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"{flag} must be a finite number > 0, got {value!r}")
    preflight.out_dir(out)
    if json_path is not None:
        preflight.out_file(json_path, "--json")
    run_samplers_report(steps=steps, shift=shift, data_std=data_std, out=out, json_path=json_path, console=console,
                        noise_level=noise_level)


pretrain_app = typer.Typer(
    help="Rebuild the embedded world's shipped networks (base video model, judge).", no_args_is_help=True
)
app.add_typer(pretrain_app, name="pretrain")

app.add_typer(study_app, name="study")  # grpo-bench study export|serve|analyze


@pretrain_app.command("base")
def pretrain_base(
    out: Path = typer.Option(
        None,
        "--out",
        help="Weights file to write (default: the shipped grpo_bench/assets/world_base.safetensors); "
        "the card goes next to it (.json).",
    ),
    steps: int | None = typer.Option(
        None, "--steps", help="Optimizer steps (batch 64); the shipped model's card gives the number."
    ),
    minutes: float | None = typer.Option(
        None, "--minutes", help="Wall-clock budget instead of --steps (the card records the steps run)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    size: int = typer.Option(16, "--size", help="Video height/width (16 or 24)."),
    save_every: int = typer.Option(0, "--save-every", help="Also save EMA checkpoints every N steps (0: off)."),
    init: Path | None = typer.Option(
        None, "--init", help="Start from these weights (a fine-tuning stage) instead of a random init."
    ),
    lr: float = typer.Option(1e-3, "--lr", help="AdamW learning rate after the warm-up."),
    warmup: int = typer.Option(200, "--warmup", help="Linear learning-rate warm-up steps."),
    evaluate: bool = typer.Option(
        True, "--eval/--no-eval", metavar="", help="Score 20-step ODE samples with the oracle and add them to the card."
    ),
) -> None:
    """Pretrain the world's base video model (rectified flow, train prompts only) and write weights + card."""
    from grpo_bench.pretrain.base import PretrainConfig, run_pretrain

    cfg = PretrainConfig(
        steps=steps, minutes=minutes, seed=seed, size=size, save_every=save_every,
        init=str(init) if init is not None else None, lr=lr, warmup=warmup,
    )
    run_pretrain(cfg, out, evaluate_card=evaluate, console=console)


@pretrain_app.command("judge")
def pretrain_judge(
    out: Path = typer.Option(
        None,
        "--out",
        help="Weights file to write (default: the shipped grpo_bench/assets/world_judge.safetensors); "
        "the card goes next to it (.json).",
    ),
    steps: int = typer.Option(2400, "--steps", help="Optimizer steps."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    size: int = typer.Option(
        16, "--size", help="Video height/width (16 or 24; needs base-model weights of that size)."
    ),
    base_videos: int = typer.Option(
        4096, "--base-videos", help="Base-model samples to train on (0: rendered videos only)."
    ),
    heldout_videos: int = typer.Option(
        512, "--heldout-videos", help="Held-out base-model samples for normalisation and the Spearman check."
    ),
    base_checkpoint: Path | None = typer.Option(
        None, "--base-checkpoint", help="Base-model weights to sample from (default: the shipped ones)."
    ),
    rank_weight: float = typer.Option(
        1.0, "--rank-weight", help="Weight of the pairwise VQ/MQ/TA ranking losses on clean ODE samples (0: off)."
    ),
    ode_videos: int = typer.Option(
        2048, "--ode-videos", help="Clean 10-step ODE base-model samples to train on (ranked within each batch)."
    ),
    check_per_prompt: int = typer.Option(
        8, "--check-per-prompt", help="Fresh ODE samples per training prompt for the card's check (0: skip)."
    ),
    init: Path | None = typer.Option(None, "--init", help="Judge weights to fine-tune from (default: random init)."),
    lr: float = typer.Option(2e-3, "--lr", help="Peak AdamW learning rate (cosine decay after a 50-step warm-up)."),
    ode_share: float = typer.Option(
        0.375, "--ode-share", help="Share of each batch drawn from the clean ODE samples (at most 0.75)."
    ),
) -> None:
    """Train the world judge (the VideoAlign stand-in) to regress the oracle; write weights + card."""
    from grpo_bench.pretrain.judge import JudgeTrainConfig, train_judge

    cfg = JudgeTrainConfig(steps=steps, seed=seed, size=size, base_videos=base_videos, heldout_videos=heldout_videos,
                           base_checkpoint=str(base_checkpoint or ""), rank_weight=rank_weight,
                           ode_videos=ode_videos, check_per_prompt=check_per_prompt, init=str(init or ""),
                           lr=lr, ode_share=ode_share)
    train_judge(cfg, out, console=console)


@app.command()
def sample(
    prompt: str = typer.Option(..., "--prompt", help="e.g. 'a red circle moving left' (world vocabulary)."),
    n: int = typer.Option(4, "--n", help="Videos to sample."),
    steps: int | None = typer.Option(
        None, "--steps", help="Sampler steps (default: the --checkpoint run's own steps, else 20)."),
    shift: float | None = typer.Option(
        None, "--shift", help="Schedule shift (default: the --checkpoint run's own shift, else 3.0)."),
    kernel: str = typer.Option(
        "ode", "--kernel", help="A registered step kernel (`grpo-bench methods` lists them); ode is the base sampler."
    ),
    noise_level: float = typer.Option(0.0, "--noise-level", help="Kernel noise level (a or eta); 0 for ode."),
    guidance: float = typer.Option(1.0, "--guidance", help="Classifier-free guidance scale (1 = off)."),
    checkpoint: Path | None = typer.Option(
        None, "--checkpoint", help="A run folder (runs/train/...), its policy/, a checkpoints/update_N folder or "
        "world-model weights (.safetensors); default: the shipped base model."),
    seed: int = typer.Option(0, "--seed", help="Seed of the initial noise and the kernel noise."),
    out: Path = typer.Option(Path("sample.gif"), "--out", help="Animated GIF to write; a PNG strip goes next to it."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the per-video scores as JSON."),
    kernel_params: list[str] | None = typer.Argument(
        None, metavar="[kernel.NAME=VALUE]...", help="The kernel's own parameters, e.g. kernel.power=2 "
        "(`grpo-bench methods` lists each kernel's; parsed as train's key=value)."),
) -> None:
    """Sample videos for one prompt: animated GIF, PNG strip, and oracle and judge scores per video."""
    from grpo_bench import preflight
    from grpo_bench.cli.sample import kernel_overrides, run_sample

    if steps is not None:
        _bounded("--steps", steps, 1, MAX_SAMPLER_STEPS)
    _bounded("--n", n, 1, MAX_SAMPLE_VIDEOS)
    for flag, value in (("--shift", shift), ("--noise-level", noise_level), ("--guidance", guidance)):
        if value is not None and not math.isfinite(value):
            raise UserError(f"{flag} must be a finite number, got {value!r}")
    preflight.out_file(out)
    if json_path is not None:
        preflight.out_file(json_path, "--json")
    run_sample(
        prompt=prompt, n=n, steps=steps, shift=shift, kernel=kernel, noise_level=noise_level, guidance=guidance,
        checkpoint=checkpoint, seed=seed, out=out, json_path=json_path, console=console,
        kernel_params=kernel_overrides(kernel_params or []),
    )


@app.command(epilog=TRAIN_BUDGET_HELP)
def train(
    method: str | None = typer.Option(
        None, "--method", help="Registered method (grpo-bench methods); default sage_grpo, or the --like suite's."),
    kl: str | None = typer.Option(None, "--kl", help="KL trust region: none, fixed, stepwise, moving, dual."),
    setting: str | None = typer.Option(None, "--setting", help="Reward weights: A (1,1,1) or B (0.5,0.5,1)."),
    seed: int | None = typer.Option(None, "--seed", help="Run seed (prompt order, noise)."),
    updates: int | None = typer.Option(
        None, "--updates", help="Number of GRPO updates (default 200: hours on a CPU; see the budget below)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default: a new folder under runs/train/)."),
    device: str | None = typer.Option(None, "--device", help="auto, cpu, cuda or cuda:N."),
    resume: bool = typer.Option(
        True, "--resume/--no-resume", metavar="", help="Continue from the folder's latest checkpoint."),
    model: str | None = typer.Option(
        None, "--model", help="Generator: world, tiny-wan, tiny-hunyuan15, a preset, hub id or folder."
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
    overrides: list[str] | None = typer.Argument(None, help="key=value config overrides (any RunConfig key)."),
) -> None:
    """Train one GRPO run: config.yaml, metrics.jsonl, checkpoints, final.json, DONE and the exported policy/.

    train's defaults are RunConfig's, not a suite's: to reproduce a suite cell give --like SUITE with the cell's --method, --kl, --setting and --seed."""  # noqa: E501  (one line: rich would keep the break)
    from grpo_bench import preflight
    from grpo_bench.cli.train import build_config, run_train

    if out is not None:
        preflight.out_dir(out)
    cfg = build_config(method, kl, setting, seed, updates, device,
                       [*(overrides or []), *([f"model={model}"] if model else [])], like=like)
    if accelerate_config is not None:
        from grpo_bench.train import distributed

        distributed.config_path(accelerate_config)  # a bad name fails here, before any launch
        if not distributed.launched():
            raise typer.Exit(distributed.relaunch(accelerate_config, sys.argv[1:]))
    code = _interruptible(lambda: run_train(cfg, out, resume, console) and 0)
    if code:
        raise typer.Exit(code)


_DEVICE_HELP = "auto, cpu, cuda or cuda:N for every cell (the same as the override device=...)."
_JOBS_HELP = "Parallel cells (default: the GPU count, each worker pinned to its GPU; else the core count)."


@app.command()
def run(
    suite: Path = typer.Argument(..., help="Suite YAML (e.g. suites/main_table.yaml)."),
    jobs: int | None = typer.Option(None, "--jobs", help=_JOBS_HELP),
    backend: str = typer.Option("local", "--backend", help="local (process pool) or submitit (SLURM job array)."),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder; the suite goes to OUT/<suite name>/."),
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="List the cells and their status; run nothing."),
    resume: bool = typer.Option(
        True, "--resume/--no-resume", metavar="", help="Skip DONE cells, continue partial ones."),
    device: str | None = typer.Option(None, "--device", help=_DEVICE_HELP),
    until_decided: bool = typer.Option(
        False, "--until-decided", metavar="",
        help="After the suite's seeds, add seeds in blocks (the suite's decide block: max_seeds, block, alpha) "
             "until every headline comparison of the power table is decided at its O'Brien-Fleming level, or "
             "max_seeds is reached; one line per look, the boundary in <suite>/decide.json and the report. "
             "Resumable: rerun to continue."),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the suite's base config."),
) -> None:
    """Run every cell of a suite (resumable, parallel), aggregate results.parquet and render the report."""
    from grpo_bench.cli.decide import decide_command
    from grpo_bench.cli.suite import run_command

    overrides = _suite_arguments(jobs, out, device, overrides)
    command = decide_command if until_decided else run_command
    raise typer.Exit(_interruptible(lambda: command(suite, jobs, backend, out, dry_run, resume, overrides, console)))


@app.command()
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


@app.command()
def ablate(
    kl: str | None = typer.Option(None, "--kl", help="'all' or a comma list of KL variants."),
    equalizer: str | None = typer.Option(None, "--equalizer", help="Comma list of on/off, e.g. on,off."),
    sde: str | None = typer.Option(
        None, "--sde", help="Comma list of registered methods or their kernels (`grpo-bench methods`)."
    ),
    base: Path | None = typer.Option(
        None, "--base", help="Suite giving base config, budget, seeds (default suites/ablate_kl.yaml)."
    ),
    jobs: int | None = typer.Option(None, "--jobs", help=_JOBS_HELP),
    backend: str = typer.Option("local", "--backend", help="local or submitit."),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder."),
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="List the cells; run nothing."),
    resume: bool = typer.Option(
        True, "--resume/--no-resume", metavar="", help="Skip DONE cells, continue partial ones."),
    device: str | None = typer.Option(None, "--device", help=_DEVICE_HELP),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the base config."),
) -> None:
    """Build an ablation grid (KL variant x equalizer x SDE) on a base suite and run it like `run`."""
    from grpo_bench.cli.suite import ablate_command

    overrides = _suite_arguments(jobs, out, device, overrides)
    raise typer.Exit(_interruptible(lambda: ablate_command(kl, equalizer, sde, base, jobs, backend, out, dry_run,
                                                           resume, overrides, console)))


_REPORT_HELP = ("A suite's run folder (runs/<suite>: finished cells so far, even while it runs), a train run "
                "folder or a results.parquet; two or more are put side by side.")


def _report_inputs(run_dirs: list[Path], out: Path | None) -> None:
    """Every input is a folder or a results.parquet, and the report folder can be written: checked first."""
    from grpo_bench import preflight

    for run_dir in run_dirs:
        if run_dir.exists() and not run_dir.is_dir() and run_dir.suffix != ".parquet":
            raise UserError(f"report: {str(run_dir)!r} is not a folder or a results.parquet "
                            "(give a suite's run folder, e.g. runs/main_table)")
    if out is not None:
        preflight.out_dir(out, "report folder")
    elif len(run_dirs) == 1 and run_dirs[0].is_dir():
        preflight.out_dir(run_dirs[0] / "report", "report folder")


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(..., help=_REPORT_HELP),
    out: Path | None = typer.Option(
        None, "--out", help="Report folder (default: RUN_DIR/report; several: runs/compare/A_vs_B)."),
) -> None:
    """Render tables, figures and report.md from whatever RUN_DIR holds (several: side by side)."""
    from grpo_bench.cli.suite import report_command

    _report_inputs(run_dirs, out)
    raise typer.Exit(report_command(run_dirs, out, console))


@app.command()
def compare(
    first: Path = typer.Argument(..., help="A suite run folder, a train run folder or a results.parquet."),
    second: Path = typer.Argument(..., help="The other one."),
    out: Path | None = typer.Option(None, "--out", help="Report folder (default: runs/compare/A_vs_B)."),
) -> None:
    """Two runs or suites side by side in one report (tables and figures label each row with its source)."""
    from grpo_bench.cli.suite import report_command

    _report_inputs([first, second], out)
    raise typer.Exit(report_command([first, second], out, console))


@app.command()
def claims(
    reports_dir: Path = typer.Argument(..., help="Folder of stored reports (e.g. reports): <suite>/results.parquet, "
                                       "samplers/, human-study analyses."),
    out: Path | None = typer.Option(None, "--out", help="Ledger file (default: REPORTS_DIR/CLAIMS.md)."),
) -> None:
    """The paper's claims, one row each: the suite and comparison that test it, the measured effect with its
    interval and a verdict (supported / contradicted / undecided), from the stored results alone."""
    from grpo_bench.cli.claims import claims_command

    raise typer.Exit(claims_command(reports_dir, out, console))


MAX_SAMPLER_STEPS = 1000
MAX_SAMPLE_VIDEOS = 256
MAX_ERROR_CHARS = 500
"""An error is one line: longer messages (a 10 MB prompt echoed back) are cut."""


def _bounded(flag: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise UserError(f"{flag} must be between {low} and {high}, got {value}")


def _suite_arguments(jobs: int | None, out: Path, device: str | None, overrides: list[str] | None) -> list[str]:
    """`run` and `ablate`: check --jobs and --out before any work; --device becomes the override device=..."""
    from grpo_bench import preflight

    _jobs(jobs)
    preflight.out_dir(out)
    return [*(overrides or []), *([f"device={device}"] if device else [])]


def _jobs(jobs: int | None) -> None:
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")


def _interruptible(work) -> int:
    """Exit code of ``work()``; 130 (one line, no traceback) when Ctrl-C stopped it."""
    from grpo_bench import interrupt

    try:
        code = work()
        return code if isinstance(code, int) else 0
    except interrupt.Interrupted as exc:  # a single run stopped at a checkpoint (train)
        from grpo_bench.cli.suite import resume_command

        error_line(f"interrupted: {exc}; resume with: {resume_command()}")
        return interrupt.EXIT_CODE
    except KeyboardInterrupt:  # the second Ctrl-C: stopped at once
        error_line("stopped at once (second Ctrl-C); rerun the same command to resume from the last checkpoint")
        return interrupt.EXIT_CODE


def error_line(message: str, prefix: str = "") -> None:
    """Print ``message`` literally (never as rich markup) on one line, cut to MAX_ERROR_CHARS."""
    from rich.text import Text

    text = " ".join(str(message).split("\n"))
    if len(text) > MAX_ERROR_CHARS:
        text = f"{text[:MAX_ERROR_CHARS]}… ({len(text) - MAX_ERROR_CHARS} more characters)"
    style = "bold yellow" if prefix.startswith("warning") else "bold red"
    line = Text(prefix, style=style) + Text(text) if prefix else Text(text)
    err_console.print(line, highlight=False, soft_wrap=True)


def warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, file=None,
                 line=None) -> None:
    """A warning on the command line is one line for the user, not Python's file:line and source line."""
    error_line(str(message), prefix="warning: ")


def main() -> None:
    import warnings

    warnings.showwarning = warning_line  # the command line only: library users keep Python's own
    try:
        app()
    except UserError as exc:
        error_line(str(exc), prefix="error: ")
        sys.exit(2)
    except ModuleNotFoundError as exc:  # an optional part (or a dependency) that is not installed
        from grpo_bench.extras import missing_line

        line = missing_line(exc)
        if line is None:  # a module we do not know how to install: a bug, keep its traceback
            raise
        error_line(line, prefix="error: ")
        sys.exit(2)
    except (PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError, OSError) as exc:
        from grpo_bench.atomic import is_disk_full

        if not (is_disk_full(exc) or isinstance(exc, (PermissionError, NotADirectoryError, IsADirectoryError,
                                                      FileExistsError)) or exc.errno in (36,)):  # 36: ENAMETOOLONG
            raise
        where = f" {exc.filename}" if exc.filename else ""
        error_line(f"cannot write{where}: {exc.strerror or exc}", prefix="error: ")
        sys.exit(2)


if __name__ == "__main__":
    main()
