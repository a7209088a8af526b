"""``grpo-bench methods``, ``samplers`` and ``sample``: the kernels and the world model without training.

Only arguments are declared here (registered on the app in ``grpo_bench.cli.entry``); the work lives in
``grpo_bench.report`` and ``grpo_bench.cli.sample``.
"""

from __future__ import annotations

import math
from pathlib import Path

import typer

from grpo_bench.cli.sample import MAX_SAMPLER_STEPS
from grpo_bench.cli.terminal import console
from grpo_bench.errors import UserError

MAX_SAMPLE_VIDEOS = 256


def _bounded(flag: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise UserError(f"{flag} must be between {low} and {high}, got {value}")


def methods() -> None:
    """List registered methods with their kernels and defaults, and the KL variants."""
    from grpo_bench.report.methods_table import print_methods

    print_methods(console)


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
        "world-model weights (.safetensors), of the world or of the embedded model it trained (a run's own model "
        "unless --model names one); default: the shipped base model."),
    seed: int = typer.Option(0, "--seed", help="Seed of the initial noise and the kernel noise."),
    out: Path = typer.Option(Path("sample.gif"), "--out", help="Animated GIF to write; a PNG strip goes next to it."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the per-video scores as JSON."),
    model: str = typer.Option(
        "world", "--model", help="Generator: the world (default), or a diffusers preset / hub id / folder, e.g. "
        "tiny-sd3 (an image model writes a PNG grid: --out x.png)."),
    reward: str | None = typer.Option(
        None, "--reward", help="Also score with this registered reward (weights on disk): a diffusers model's only "
        "scores; an embedded image model is scored by its oracle and training reward without it."),
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
    from grpo_bench.world.roles import video_world

    if checkpoint is not None and model == video_world().model:  # --model left out: the run's own model
        from grpo_bench.cli.sample import trained_model

        model = trained_model(checkpoint) or model
    if model != video_world().model:
        from grpo_bench import models
        from grpo_bench.cli.sample_generator import check_model_out, run_model_sample
        from grpo_bench.core.sde import make_kernel

        embedded = model in models.names() and getattr(models.MODELS.get(model), "embedded", False)
        if checkpoint is not None and not embedded:
            raise UserError(f"--checkpoint samples a trained policy of an embedded model; --model {model} is not "
                            "one: give its base model only")
        out = Path("sample.png") if out == Path("sample.gif") else out
        check_model_out(model, reward, out)
        try:
            k = make_kernel(kernel, noise_level, params=kernel_overrides(kernel_params or []))
        except UserError as exc:
            raise UserError(f"command line: {exc}") from None
        trained, loaded = {}, None
        if checkpoint is not None:  # an image world's policy, sampled as it was trained
            from grpo_bench.cli.sample import load_policy, trained_config

            loaded, trained = load_policy(checkpoint, model), trained_config(checkpoint)
        steps = int(trained.get("steps", 20)) if steps is None else steps
        shift = float(trained.get("shift", 3.0)) if shift is None else shift
        run_model_sample(model, prompt, n, steps, shift, k, guidance, seed, out, reward=reward, json_path=json_path,
                         console=console, loaded=loaded)
        return
    if reward is not None:
        raise UserError("--reward scores a --model's samples; the world is scored by its oracle and judge")
    run_sample(
        prompt=prompt, n=n, steps=steps, shift=shift, kernel=kernel, noise_level=noise_level, guidance=guidance,
        checkpoint=checkpoint, seed=seed, out=out, json_path=json_path, console=console,
        kernel_params=kernel_overrides(kernel_params or []),
    )
