"""Pretrain the image world's base model with the rectified-flow loss, on one CPU core
(``python -m grpo_bench.image_world.pretrain --minutes 13``).

Data: fresh scenes from the renderer every step, of the 'train' prompts only (the held-out scenes and their
mirrored phrasings are never seen); count and relation prompts drawn half and half (there are 11x more relation
prompts). Loss ||v(x_sigma) - (z - x0)||^2 at x_sigma = (1 - sigma) x0 + sigma z; the whole conditioning is
dropped to the null tokens with probability COND_DROP for guidance. bf16 autocast where the CPU has bf16 units
(as the runs), one thread (the machine is shared). The shipped weights are the EMA of the parameters; the card
records data, steps, wall time and the checker's per-constraint accuracy of 20-step ODE samples on the held-out
and on training prompts.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from grpo_bench.atomic import atomic_write_text
from grpo_bench.image_world.checker import CONSTRAINTS, check
from grpo_bench.image_world.grammar import parse, prompts
from grpo_bench.image_world.model import DEFAULT_WEIGHTS, ImageWorldModel, save_weights
from grpo_bench.image_world.net import NULL_INDEX, ImageUNet, ImageUNetConfig
from grpo_bench.image_world.render import render

CONFIG = ImageUNetConfig(channels=(16, 32, 64), patch=2)  # the shipped net (docs/image_world.md "The base model")
BATCH, LR, WARMUP, EMA, COND_DROP, UNIFORM_SIGMA = 64, 1e-3, 200, 0.999, 0.1, 0.5


def _batch(g: torch.Generator, counts: list[str], relations: list[str]) -> tuple:
    """(x0, cond, sigma, z) of one step, every draw from ``g``."""
    pick_relation = torch.rand(BATCH, generator=g) < 0.5
    texts = [relations[int(torch.randint(len(relations), (1,), generator=g))] if r else
             counts[int(torch.randint(len(counts), (1,), generator=g))] for r in pick_relation.tolist()]
    x0 = render(texts, seed=int(torch.randint(2**62, (1,), generator=g)))[:, :, 0]
    cond = torch.tensor([parse(t).cond() for t in texts], dtype=torch.long)
    return flow_batch(x0, cond, torch.tensor(NULL_INDEX), g)


def flow_batch(x0: torch.Tensor, cond: torch.Tensor, null: torch.Tensor | int, g: torch.Generator) -> tuple:
    """(x0, cond, sigma, z) of a pretraining step from clean images and their conditioning: each row's cond set
    to ``null`` with probability COND_DROP (guidance), sigma half uniform and half shifted as the samplers'
    schedule (shift 3), z standard noise; drawn from ``g`` in that order."""
    n = len(x0)
    cond[torch.rand(n, generator=g) < COND_DROP] = null
    u = torch.rand(n, generator=g)
    sigma = torch.where(torch.rand(n, generator=g) < UNIFORM_SIGMA, u, 3.0 * u / (1.0 + 2.0 * u))
    return x0, cond, sigma, torch.randn(x0.shape, generator=g)


def fit(net: torch.nn.Module, batch: Callable[[], tuple], minutes: float | None, steps: int | None) -> tuple:
    """The rectified-flow loop shared by the image world's base models: AdamW with warm-up, gradient clipping,
    bf16 autocast where the CPU has bf16 units, an EMA of the parameters; until ``steps`` or ``minutes`` run out.
    ``batch()`` gives (x0, cond, sigma, z). Returns (the EMA network, steps, wall seconds, loss EMA, bf16)."""
    ema = copy.deepcopy(net)
    ema.requires_grad_(False)
    opt = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=0.0)
    bf16 = _cpu_bf16()
    t0 = time.perf_counter()
    deadline = t0 + 60.0 * minutes if minutes is not None else math.inf
    step, running = 0, None
    while (steps is None or step < steps) and time.perf_counter() < deadline:
        x0, cond, sigma, z = batch()
        s = sigma[:, None, None, None]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            v = net((1 - s) * x0 + s * z, sigma, cond)
        loss = (v.float() - (z - x0)).pow(2).mean()
        for group in opt.param_groups:
            group["lr"] = LR * min(1.0, (step + 1) / WARMUP)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        decay = min(EMA, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, p in zip(ema.parameters(), net.parameters()):
                pe.lerp_(p, 1 - decay)
        step += 1
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        if step % 50 == 0:
            print(f"step {step}  loss {running:.4f}  {step * len(x0) / (time.perf_counter() - t0):.0f} images/s",
                  flush=True)
    return ema, step, time.perf_counter() - t0, running, bf16


def train(out: Path, minutes: float | None, steps: int | None, seed: int = 0,
          config: ImageUNetConfig = CONFIG) -> dict:
    """Train a net of ``config`` until ``steps`` or ``minutes`` run out; write the EMA weights to ``out``; return
    the card."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    net = ImageUNet(config)
    g = torch.Generator().manual_seed(seed)
    train_prompts = prompts("train")
    counts = [p for p in train_prompts if not parse(p).is_relation]
    relations = [p for p in train_prompts if parse(p).is_relation]
    ema, step, wall, running, bf16 = fit(net, lambda: _batch(g, counts, relations), minutes, steps)
    save_weights(ema, out, extra={"steps": step, "seed": seed})
    return {
        "model": "image world base model (2D-conv U-Net, rectified flow, 32x32 RGB stills)",
        "weights": out.name,
        "command": (f"python -m grpo_bench.image_world.pretrain --steps {step} --seed {seed} --channels "
                    f"{','.join(map(str, config.channels))} --patch {config.patch} --out {out.name}"),
        "data": f"renderer scenes of prompts('train') ({len(train_prompts)} prompts: {len(counts)} count, "
                f"{len(relations)} relation, drawn half and half); the 8 held-out prompts and their mirrors never",
        "seed": seed, "steps": step, "batch": BATCH, "lr": LR, "warmup": WARMUP, "ema": EMA, "cond_drop": COND_DROP,
        "bf16": bf16, "threads": torch.get_num_threads(), "wall_time_s": round(wall, 1),
        "final_loss_ema": round(running, 5) if running is not None else None, "torch": torch.__version__,
        "params": sum(p.numel() for p in ema.parameters()), "architecture": config.to_dict(),
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }


def _cpu_bf16() -> bool:
    """AMX or AVX512-BF16 on this CPU (the same test as a run's, train/precision.py ``has_bf16_units``, which this
    layer may not import)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def accuracy(model: ImageWorldModel, split: str, per_prompt: int, steps: int = 20, shift: float = 3.0,
             seed: int = 1234) -> dict:
    """The checker's mean scores of 20-step ODE samples (guidance 1) of a split: per constraint and overall."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel

    texts = [p for p in prompts(split) for _ in range(per_prompt)]
    noise = torch.randn(len(texts), *model.latent_shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        images = sample(model, texts, noise, sigmas(steps, shift), make_kernel("ode"), decode=True)
    scores = check(images, texts)
    out = {"split": split, "images": len(texts), "steps": steps, "shift": shift}
    for k in ("correct", "ta", "vq", "mq", "manifold", *CONSTRAINTS):
        v = scores[k][~scores[k].isnan()]
        out[k] = round(float(v.mean()), 4) if len(v) else None
    by_count = {}
    for n in (1, 2, 3, 4):
        rows = [i for i, t in enumerate(texts) if not parse(t).is_relation and parse(t).count == n]
        if rows:
            by_count[str(n)] = round(float(scores["count"][rows].mean()), 4)
    out["count_by_n"] = by_count
    return out


def command_line(description: str, default_out: Path, argv: list[str] | None,
                 per_prompt: int | None = None, architecture: bool = False) -> argparse.Namespace:
    """The image world's pretraining commands' arguments: ``--minutes`` or ``--steps`` (one is needed), ``--seed``,
    ``--out``, for a base model's card ``--per-prompt`` (samples per held-out prompt) and, with ``architecture``,
    the net's ``--channels`` (three, comma-separated) and ``--patch``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=default_out)
    if per_prompt is not None:
        parser.add_argument("--per-prompt", type=int, default=per_prompt,
                            help="samples per held-out prompt on the card")
    if architecture:
        parser.add_argument("--channels", type=_channels, default=CONFIG.channels,
                            help="the three levels' widths, e.g. 16,32,64")
        parser.add_argument("--patch", type=int, choices=(1, 2, 4), default=CONFIG.patch,
                            help="pixels folded into channels per side (net.py)")
    args = parser.parse_args(argv)
    if args.minutes is None and args.steps is None:
        parser.error("give --minutes or --steps")
    return args


def _channels(text: str) -> tuple[int, int, int]:
    """Three positive widths, each divisible by the GroupNorm's 8 groups, from "a,b,c"."""
    try:
        widths = tuple(int(w) for w in text.split(","))
    except ValueError:
        widths = ()
    if len(widths) != 3 or any(w <= 0 or w % ImageUNetConfig.groups for w in widths):
        raise argparse.ArgumentTypeError(f"--channels takes three widths divisible by {ImageUNetConfig.groups}, "
                                         f"e.g. 16,32,64; got {text!r}")
    return widths  # type: ignore[return-value]


def write_card(weights: Path, card: dict) -> None:
    """The card beside its weights file (``<weights>.json``), atomically."""
    atomic_write_text(weights.with_suffix(".json"), json.dumps(card, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = command_line(__doc__.splitlines()[0], DEFAULT_WEIGHTS, argv, per_prompt=32, architecture=True)
    config = ImageUNetConfig(channels=args.channels, patch=args.patch)
    card = train(args.out, args.minutes, args.steps, args.seed, config)
    from grpo_bench.image_world.model import image_world_model

    model = image_world_model(path=args.out)
    card["checker"] = {"held_out": accuracy(model, "eval", args.per_prompt),
                       "train_sample": accuracy(model, "train", 1)}
    write_card(args.out, card)
    print(json.dumps(card["checker"], indent=2))


if __name__ == "__main__":
    main()
