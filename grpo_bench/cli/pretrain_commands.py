"""``grpo-bench pretrain base|judge|net``: the typer sub-app that rebuilds the embedded worlds' shipped networks
(``net NAME``: a plug-in world's, grpo_bench/world/pretrainers.py).

Only arguments are declared here (the app adds this sub-app in ``grpo_bench.cli.entry``); the work lives
in ``grpo_bench.pretrain``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer.models import OptionInfo

from grpo_bench.cli.terminal import console

pretrain_app = typer.Typer(
    help="Rebuild the embedded worlds' shipped networks (base video model, judge; a plug-in world's: net NAME).",
    no_args_is_help=True
)


def _weights_out(shipped: str) -> OptionInfo:
    """``--out`` of both commands: they differ only in the shipped weights file it defaults to."""
    return typer.Option("--out", help=f"Weights file to write (default: the shipped grpo_bench/assets/{shipped}); "
                        "the card goes next to it (.json).")


# --out and --seed of both commands, declared once so that their help cannot drift apart
BaseOutOption = Annotated[Path, _weights_out("world_base.safetensors")]
JudgeOutOption = Annotated[Path, _weights_out("world_judge.safetensors")]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of every random draw.")]


@pretrain_app.command("base")
def pretrain_base(
    out: BaseOutOption = None,
    steps: int | None = typer.Option(
        None, "--steps", help="Optimizer steps (batch 64); the shipped model's card gives the number."
    ),
    minutes: float | None = typer.Option(
        None, "--minutes", help="Wall-clock budget instead of --steps (the card records the steps run)."
    ),
    seed: SeedOption = 0,
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
    out: JudgeOutOption = None,
    steps: int = typer.Option(2400, "--steps", help="Optimizer steps."),
    seed: SeedOption = 0,
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


@pretrain_app.command("net", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def pretrain_net(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="A plug-in world's network (e.g. image_world, image_world_text, "
                               "image_world_judge)."),
) -> None:
    """Rebuild a plug-in world's shipped network; the arguments after NAME are its own (NAME -- --help)."""
    from grpo_bench.world.pretrainers import PRETRAINERS

    PRETRAINERS.get(name, where="grpo-bench pretrain net: ").run(list(ctx.args))
