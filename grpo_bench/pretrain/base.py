"""Pretrain the world's base video model with the rectified-flow loss (``grpo-bench pretrain base``).

Data: fresh videos from the generator every step, ONLY of the 'train' prompts (the held-out
'eval' combinations are never seen). Loss: ||v(x_sigma) - (z - x0)||^2 with
x_sigma = (1-sigma) x0 + sigma z. The whole conditioning is replaced by the null tokens with
probability ``cond_drop`` so classifier-free guidance works. The shipped weights are the
exponential moving average (EMA) of the parameters.

Deterministic for a given seed (on CPU with the same thread count): prompts, render seeds,
noise and sigmas come from one seeded generator. The learning rate is constant after the
warm-up, so the checkpoint at step N of a long run equals a run with ``--steps N``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from rich.console import Console

from grpo_bench.atomic import atomic_write_text, strict_json
from grpo_bench.errors import UserError
from grpo_bench.models.world import FRAMES, WorldVideoModel, load_weights, save_weights
from grpo_bench.world.generator import SIZES, render
from grpo_bench.world.model import NULL_INDEX, WorldUNet, WorldUNetConfig, param_count
from grpo_bench.world.vocab import parse, prompts


@dataclass
class PretrainConfig:
    """Settings of one pretraining run (all recorded in the card)."""

    steps: int | None = None
    """Optimizer steps (None: train until ``minutes`` run out)."""
    minutes: float | None = None
    """Wall-clock budget; the card records the steps actually run so ``--steps`` reproduces it."""
    seed: int = 0
    """Seed of every random draw (prompts, render seeds, noise, sigmas, init)."""
    size: int = 16
    """Video height/width (16 or 24)."""
    batch: int = 64
    """Videos per optimizer step."""
    lr: float = 1e-3
    """AdamW learning rate after the warm-up (constant, see module docstring)."""
    warmup: int = 200
    """Linear learning-rate warm-up steps."""
    ema: float = 0.999
    """EMA decay of the shipped weights (ramped up as (1+t)/(10+t) early on)."""
    cond_drop: float = 0.1
    """Probability of training a sample unconditionally (null tokens) for guidance."""
    uniform_sigma: float = 0.5
    """Share of sigmas drawn uniformly; the rest follow the sampler's shifted density (shift 3),
    which puts more training where the object, its colour and its direction are decided."""
    save_every: int = 0
    """Also save EMA checkpoints every N steps next to the output (0: off)."""
    init: str | None = None
    """Start from these weights (a second, fine-tuning stage) instead of a random init; the
    architecture then comes from the file."""
    model: WorldUNetConfig = field(default_factory=WorldUNetConfig)
    """Network architecture."""


def _check(cfg: PretrainConfig) -> None:
    if cfg.steps is None and cfg.minutes is None:
        raise UserError("pretrain base: give --steps or --minutes")
    if cfg.steps is not None and cfg.steps < 1:
        raise UserError(f"pretrain base: --steps must be >= 1, got {cfg.steps}")
    if cfg.minutes is not None and not cfg.minutes > 0:
        raise UserError(f"pretrain base: --minutes must be > 0, got {cfg.minutes}")
    if cfg.size not in SIZES:
        raise UserError(f"pretrain base: --size must be one of {SIZES}, got {cfg.size}")


def _batch(g: torch.Generator, cfg: PretrainConfig, cond_table: torch.Tensor, texts: list[str]):
    """(x0, cond, sigma, z) for one step, all drawn from ``g`` (and a render seed drawn from it)."""
    idx = torch.randint(len(texts), (cfg.batch,), generator=g)
    render_seed = int(torch.randint(2**62, (1,), generator=g))
    x0 = render([texts[i] for i in idx.tolist()], seed=render_seed, size=cfg.size, frames=FRAMES)
    cond = cond_table[idx].clone()  # [B, 3]
    drop = torch.rand(cfg.batch, generator=g) < cfg.cond_drop
    cond[drop] = torch.tensor(NULL_INDEX)
    u = torch.rand(cfg.batch, generator=g)
    shifted = 3.0 * u / (1.0 + 2.0 * u)
    sigma = torch.where(torch.rand(cfg.batch, generator=g) < cfg.uniform_sigma, u, shifted)
    z = torch.randn(x0.shape, generator=g)
    return x0, cond, sigma, z


def train(cfg: PretrainConfig, out: Path, console: Console | None = None) -> dict:
    """Train, write the EMA weights to ``out`` and the card next to it; returns the card."""
    _check(cfg)
    console = console or Console()
    torch.manual_seed(cfg.seed)
    if cfg.init is not None:
        net, _ = load_weights(Path(cfg.init))
        cfg = replace(cfg, model=net.config)
    else:
        net = WorldUNet(cfg.model)
    net.train()
    ema = WorldUNet(cfg.model)
    ema.load_state_dict(net.state_dict())
    ema.requires_grad_(False)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(cfg.seed)
    texts = prompts("train")
    cond_table = torch.tensor([parse(p) for p in texts], dtype=torch.long)
    out = Path(out)

    t0 = time.perf_counter()
    deadline = t0 + 60.0 * cfg.minutes if cfg.minutes is not None else math.inf
    max_steps = cfg.steps if cfg.steps is not None else 10**9
    step, running = 0, None
    while step < max_steps and time.perf_counter() < deadline:
        x0, cond, sigma, z = _batch(g, cfg, cond_table, texts)
        s = sigma[:, None, None, None, None]
        x = (1 - s) * x0 + s * z
        loss = (net(x, sigma, cond) - (z - x0)).pow(2).mean()
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.warmup)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        decay = min(cfg.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, p in zip(ema.parameters(), net.parameters()):
                pe.lerp_(p, 1 - decay)
            for be, b in zip(ema.buffers(), net.buffers()):
                be.copy_(b)
        step += 1
        value = loss.item()
        running = value if running is None else 0.98 * running + 0.02 * value
        if step % 50 == 0 or step == max_steps:
            rate = step * cfg.batch / (time.perf_counter() - t0)
            console.print(f"step {step}  loss {running:.4f}  {rate:.0f} videos/s", highlight=False)
            console.file.flush()  # progress is visible in a redirected log
        if cfg.save_every and step % cfg.save_every == 0:
            save_weights(ema, out.with_name(f"{out.stem}.step{step}{out.suffix}"), cfg.size, extra={"steps": step})
    wall = time.perf_counter() - t0

    save_weights(ema, out, cfg.size, extra={"steps": step, "seed": cfg.seed})
    card = {
        "model": "world base video model (3D-conv U-Net, rectified flow)",
        "weights": out.name,
        "command": _command(cfg, step, out),
        "seed": cfg.seed,
        "steps": step,
        "wall_time_s": round(wall, 1),
        "videos_per_s": round(step * cfg.batch / wall, 1),
        "final_loss_ema": round(running, 5) if running is not None else None,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "params": param_count(ema),
        "train_prompts": "world prompts('train') only (40 combinations)",
        "config": {**{k: v for k, v in asdict(cfg).items() if k != "model"}, "model": cfg.model.to_dict()},
        "sha256": _sha256(out),
    }
    if cfg.init is not None:
        card["init"] = {"file": Path(cfg.init).name, "sha256": _sha256(Path(cfg.init)), "card": _init_card(cfg.init)}
    write_card(out, card)
    return card


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _init_card(init: str) -> dict | None:
    path = card_path(Path(init))
    return json.loads(path.read_text()) if path.is_file() else None


def _command(cfg: PretrainConfig, step: int, out: Path) -> str:
    """The command(s) that rebuild these weights: a second stage is preceded by its --init file's own
    command (from that file's card, writing the name the second stage reads)."""
    cmd = f"grpo-bench pretrain base --steps {step} --seed {cfg.seed} --size {cfg.size}"
    if cfg.lr != PretrainConfig.lr or cfg.warmup != PretrainConfig.warmup:
        cmd += f" --lr {cfg.lr:g} --warmup {cfg.warmup}"
    if cfg.init is None:
        return f"{cmd} --out {out.name}"
    init = Path(cfg.init)
    cmd += f" --init {init.name} --out {out.name}"
    prev = _init_card(cfg.init)
    if prev is None:
        return cmd
    first = prev["command"].replace(f"--out {prev['weights']}", f"--out {init.name}")
    return f"{first} && {cmd}"


def card_path(weights: Path) -> Path:
    return Path(weights).with_suffix(".json")


def write_card(weights: Path, card: dict) -> None:
    atomic_write_text(card_path(weights), strict_json(card, indent=2) + "\n")


def read_card(weights: Path) -> dict:
    path = card_path(weights)
    if not path.is_file():
        raise UserError(f"model card {path} not found; rebuild it with `grpo-bench pretrain base --out {weights}`")
    return json.loads(path.read_text())


def evaluate(
    model: WorldVideoModel,
    split: str = "eval",
    per_prompt: int = 8,
    steps: int = 20,
    shift: float = 3.0,
    guidance: float = 1.0,
    seed: int = 1234,
) -> dict[str, float]:
    """Oracle accuracies of 20-step ODE samples (the issue's evaluation protocol): colour, shape,
    direction and all-correct rates plus mean vq/mq/ta/manifold over ``per_prompt`` videos per prompt."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.world.oracle import oracle

    texts = [p for p in prompts(split) for _ in range(per_prompt)]
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(len(texts), *model.latent_shape, generator=g)
    x = sample(model, texts, noise, sigmas(steps, shift), make_kernel("ode"), guidance=guidance)
    scores = oracle(model.decode(x), texts)
    keys = ("color_ok", "shape_ok", "direction_ok", "correct", "vq", "mq", "ta", "manifold")
    out = {k: round(float(scores[k].float().mean()), 4) for k in keys}
    return {"split": split, "videos": len(texts), "steps": steps, "shift": shift, "guidance": guidance, **out}


def run_pretrain(
    cfg: PretrainConfig, out: Path | None, evaluate_card: bool = True, console: Console | None = None
) -> dict:
    """The ``grpo-bench pretrain base`` command: train, then add oracle scores to the card."""
    from grpo_bench.models.world import DEFAULT_WEIGHTS

    console = console or Console()
    out = Path(out) if out is not None else DEFAULT_WEIGHTS
    card = train(cfg, out, console)
    if evaluate_card:
        card = score_card(out, console)
    console.print(f"wrote {out} and {card_path(out)} ({card['steps']} steps, {card['wall_time_s']} s)", highlight=False)
    return card


def score_card(weights: Path, console: Console | None = None, per_prompt: int = 8) -> dict:
    """Add the oracle scores (20-step ODE, guidance 1, shift 3) on eval and train prompts to the card."""
    from grpo_bench.models.world import world_model

    model = world_model(path=weights)
    card = read_card(weights)
    card["oracle"] = {split: evaluate(model, split, per_prompt=per_prompt) for split in ("eval", "train")}
    write_card(weights, card)
    if console is not None:
        for split, row in card["oracle"].items():
            console.print(f"oracle on {split} prompts: {row}", highlight=False)
    return card
