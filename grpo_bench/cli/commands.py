"""The ``grpo-bench`` command line (DESIGN.md §6).

Each command's work lives in its own module; this file only declares arguments. A user mistake
(UserError) prints one line and exits with code 2, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from grpo_bench.errors import UserError

app = typer.Typer(
    name="grpo-bench",
    help="Benchmark and ablation harness for GRPO-style RL of flow-matching video generators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
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
    out: Path = typer.Option(Path("reports/samplers"), "--out", help="Folder for Table 1 and Figure 1."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write per-step std and variance errors as JSON."),
) -> None:
    """Table 1 / Figure 1: noise each kernel injects, and its marginal-variance error (exact Gaussian model)."""
    from grpo_bench.report.samplers import run_samplers_report

    run_samplers_report(steps=steps, shift=shift, data_std=data_std, out=out, json_path=json_path, console=console)


pretrain_app = typer.Typer(help="Rebuild the embedded world's shipped networks (base video model, judge).", no_args_is_help=True)
app.add_typer(pretrain_app, name="pretrain")


@pretrain_app.command("base")
def pretrain_base(
    out: Path = typer.Option(None, "--out", help="Weights file to write (default: the shipped grpo_bench/assets/world_base.safetensors); the card goes next to it (.json)."),
    steps: int | None = typer.Option(None, "--steps", help="Optimizer steps (batch 64); the shipped model's card gives the number."),
    minutes: float | None = typer.Option(None, "--minutes", help="Wall-clock budget instead of --steps (the card records the steps run)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    size: int = typer.Option(16, "--size", help="Video height/width (16 or 24)."),
    save_every: int = typer.Option(0, "--save-every", help="Also save EMA checkpoints every N steps (0: off)."),
    init: Path | None = typer.Option(None, "--init", help="Start from these weights (a fine-tuning stage) instead of a random init."),
    lr: float = typer.Option(1e-3, "--lr", help="AdamW learning rate after the warm-up."),
    warmup: int = typer.Option(200, "--warmup", help="Linear learning-rate warm-up steps."),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Score 20-step ODE samples with the oracle and add them to the card."),
) -> None:
    """Pretrain the world's base video model (rectified flow, train prompts only) and write weights + card."""
    from grpo_bench.world.pretrain import PretrainConfig, run_pretrain

    cfg = PretrainConfig(
        steps=steps, minutes=minutes, seed=seed, size=size, save_every=save_every,
        init=str(init) if init is not None else None, lr=lr, warmup=warmup,
    )
    run_pretrain(cfg, out, evaluate_card=evaluate, console=console)


@pretrain_app.command("judge")
def pretrain_judge(
    out: Path = typer.Option(None, "--out", help="Weights file to write (default: the shipped grpo_bench/assets/world_judge.safetensors); the card goes next to it (.json)."),
    steps: int = typer.Option(2400, "--steps", help="Optimizer steps."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    size: int = typer.Option(16, "--size", help="Video height/width (16 or 24; needs base-model weights of that size)."),
    base_videos: int = typer.Option(4096, "--base-videos", help="Base-model samples to train on (0: rendered videos only)."),
    heldout_videos: int = typer.Option(512, "--heldout-videos", help="Held-out base-model samples for normalisation and the Spearman check."),
    base_checkpoint: Path | None = typer.Option(None, "--base-checkpoint", help="Base-model weights to sample from (default: the shipped ones)."),
    rank_weight: float = typer.Option(1.0, "--rank-weight", help="Weight of the pairwise TA ranking loss on base-model videos (0: off)."),
) -> None:
    """Train the world judge (the VideoAlign stand-in) to regress the oracle; write weights + card."""
    from grpo_bench.rewards.judge_train import JudgeTrainConfig, train_judge

    cfg = JudgeTrainConfig(steps=steps, seed=seed, size=size, base_videos=base_videos, heldout_videos=heldout_videos,
                           base_checkpoint=str(base_checkpoint or ""), rank_weight=rank_weight)
    train_judge(cfg, out, console=console)


@app.command()
def sample(
    prompt: str = typer.Option(..., "--prompt", help="e.g. 'a red circle moving left' (world vocabulary)."),
    n: int = typer.Option(4, "--n", help="Videos to sample."),
    steps: int = typer.Option(20, "--steps", help="Sampler steps."),
    shift: float = typer.Option(3.0, "--shift", help="Schedule shift."),
    kernel: str = typer.Option("ode", "--kernel", help="Step kernel: ode, flow, dance, sage, cps."),
    noise_level: float = typer.Option(0.0, "--noise-level", help="Kernel noise level (a or eta); 0 for ode."),
    guidance: float = typer.Option(1.0, "--guidance", help="Classifier-free guidance scale (1 = off)."),
    checkpoint: Path | None = typer.Option(None, "--checkpoint", help="World-model weights (.safetensors); default: the shipped base model."),
    seed: int = typer.Option(0, "--seed", help="Seed of the initial noise and the kernel noise."),
    out: Path = typer.Option(Path("sample.gif"), "--out", help="Animated GIF to write; a PNG strip goes next to it."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the per-video scores as JSON."),
) -> None:
    """Sample videos for one prompt: animated GIF, PNG strip, and oracle and judge scores per video."""
    from grpo_bench.cli.sample import run_sample

    run_sample(
        prompt=prompt, n=n, steps=steps, shift=shift, kernel=kernel, noise_level=noise_level, guidance=guidance,
        checkpoint=checkpoint, seed=seed, out=out, json_path=json_path, console=console,
    )


@app.command()
def train(
    method: str = typer.Option("sage_grpo", "--method", help="Registered method (grpo-bench methods)."),
    kl: str | None = typer.Option(None, "--kl", help="KL trust region: none, fixed, stepwise, moving, dual."),
    setting: str | None = typer.Option(None, "--setting", help="Reward weights: A (1,1,1) or B (0.5,0.5,1)."),
    seed: int | None = typer.Option(None, "--seed", help="Run seed (prompt order, noise)."),
    updates: int | None = typer.Option(None, "--updates", help="Number of GRPO updates."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default: a new folder under runs/train/)."),
    device: str | None = typer.Option(None, "--device", help="auto, cpu, cuda or cuda:N."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from the folder's latest checkpoint."),
    model: str | None = typer.Option(None, "--model", help="Generator: world, tiny-wan, tiny-hunyuan15, a preset, hub id or folder."),
    accelerate_config: str | None = typer.Option(
        None, "--accelerate-config",
        help="Re-launch through `accelerate launch` with a shipped config (single_gpu, multi_gpu, fsdp2, deepspeed_zero2) or a YAML file."),
    overrides: list[str] | None = typer.Argument(None, help="key=value config overrides (any RunConfig key)."),
) -> None:
    """Train one GRPO run: config.yaml, metrics.jsonl, checkpoints, final.json and DONE in the run folder."""
    from grpo_bench.cli.train import build_config, run_train

    cfg = build_config(method, kl, setting, seed, updates, device, [*(overrides or []), *([f"model={model}"] if model else [])])
    if accelerate_config is not None:
        from grpo_bench.train import distributed

        distributed.config_path(accelerate_config)  # a bad name fails here, before any launch
        if not distributed.launched():
            raise typer.Exit(distributed.relaunch(accelerate_config, sys.argv[1:]))
    run_train(cfg, out, resume, console)


_JOBS_HELP = "Parallel cells (default: the GPU count, each worker pinned to its GPU; else the core count)."


@app.command()
def run(
    suite: Path = typer.Argument(..., help="Suite YAML (e.g. suites/main_table.yaml)."),
    jobs: int | None = typer.Option(None, "--jobs", help=_JOBS_HELP),
    backend: str = typer.Option("local", "--backend", help="local (process pool) or submitit (SLURM job array)."),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder; the suite goes to OUT/<suite name>/."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the cells and their status; run nothing."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip DONE cells, continue partial ones."),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the suite's base config."),
) -> None:
    """Run every cell of a suite (resumable, parallel), aggregate results.parquet and render the report."""
    from grpo_bench.cli.suite import run_command

    raise typer.Exit(run_command(suite, jobs, backend, out, dry_run, resume, overrides or [], console))


@app.command()
def plan(
    suite: Path = typer.Argument(..., help="Suite YAML (e.g. suites/hunyuan15_paper.yaml)."),
    gpu_memory_gb: float | None = typer.Option(None, "--gpu-memory-gb", help="GPU memory per device (default: the suite's budget.gpu_memory_gb); a cell predicted above it is refused (exit 2)."),
    tflops: float = typer.Option(400.0, "--tflops", help="Sustained TFLOP/s per GPU for the time estimate."),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the suite's base config."),
) -> None:
    """Predict per cell the model size, peak GPU and host memory per process and seconds per update; no weights needed."""
    from grpo_bench.cli.plan import plan_command

    raise typer.Exit(plan_command(suite, gpu_memory_gb, tflops, overrides or [], console))


@app.command()
def ablate(
    kl: str | None = typer.Option(None, "--kl", help="'all' or a comma list of KL variants."),
    equalizer: str | None = typer.Option(None, "--equalizer", help="Comma list of on/off, e.g. on,off."),
    sde: str | None = typer.Option(None, "--sde", help="Comma list of methods or kernels (dance, flow, sage, cps)."),
    base: Path | None = typer.Option(None, "--base", help="Suite giving base config, budget, seeds (default suites/ablate_kl.yaml)."),
    jobs: int | None = typer.Option(None, "--jobs", help=_JOBS_HELP),
    backend: str = typer.Option("local", "--backend", help="local or submitit."),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the cells; run nothing."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip DONE cells, continue partial ones."),
    overrides: list[str] | None = typer.Argument(None, help="key=value overrides of the base config."),
) -> None:
    """Build an ablation grid (KL variant x equalizer x SDE) on a base suite and run it like `run`."""
    from grpo_bench.cli.suite import ablate_command

    raise typer.Exit(ablate_command(kl, equalizer, sde, base, jobs, backend, out, dry_run, resume, overrides or [], console))


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A suite's run folder (runs/<suite>).")) -> None:
    """Re-render tables, figures and report.md from RUN_DIR/results.parquet."""
    from grpo_bench.cli.suite import report_command

    raise typer.Exit(report_command(run_dir, console))


def main() -> None:
    try:
        app()
    except UserError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
