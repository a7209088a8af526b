"""Training of the world judge (``grpo-bench pretrain judge``): regress the oracle's VQ/MQ/TA.

Training videos mix three sources, each scored by the exact oracle on the fly:

* rendered videos, clean or with one or two corruptions (``world/corrupt.py``) of random strength, or
  partially re-noised (x = (1-s) x0 + s z, what an unfinished sampler leaves);
* base-model samples (``grpo_bench.models.load("world")``) drawn with the harness's own kernels (ODE and
  the SDE kernels RL rolls out with), sampled once before training;
* either of the above paired with a prompt that differs in one word, so TA must read the prompt.

The loss is a regression on the oracle's scores and sub-scores plus a pairwise ranking loss on TA
among the base-model videos of each batch (``ranking_loss``): on those, TA's fine order is what the
regression learns worst. Measured at 300 steps on the same data: TA Spearman 0.49 without attention
pooling or ranking, 0.55 with pooling, 0.68 with both; the shipped judge (2400 steps) reaches 0.83.

After training the raw heads are z-normalised over base-model samples (as VideoAlign's are) and the
judge is scored by Spearman correlation with the oracle on held-out base-model samples (other seeds).
The weights go to a safetensors file and a JSON card with the command, seed, steps, wall time and
the measured correlations.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.rewards.world_judge import (
    AUXILIARY,
    DEFAULT_WEIGHTS,
    DIMENSIONS,
    PARTS,
    JudgeConfig,
    WorldJudge,
    save_judge,
)
from grpo_bench.world.corrupt import CORRUPTIONS
from grpo_bench.world.generator import SIZES, direction_vectors, render
from grpo_bench.world.oracle import fit, oracle
from grpo_bench.world.vocab import COLORS, MOTIONS, SHAPES, parse, prompt_text
from grpo_bench.world.vocab import prompts as all_prompts

# (kernel, noise level, steps) of the base-model samples: the evaluation sampler and RL's rollout kernels.
BASE_SAMPLERS = (("ode", 0.0, 20), ("ode", 0.0, 10), ("sage", 0.5, 10), ("flow", 0.7, 10), ("dance", 0.3, 10),
                 ("cps", 0.7, 10), ("sage", 1.0, 10))
AUX_WEIGHT = 0.5
SCORE_WEIGHTS = torch.tensor([1.0, 1.0, 2.0])  # (vq, mq, ta): TA's fine ordering is the hardest to learn
LOG_FLOOR = -7.0  # log-score targets are floored here (a score of ~0.001: pure noise)
LOG_TARGETS = ("vq", "mq", "bg", "edge", "palette", "velocity", "size", "constancy", "flicker")


@dataclass
class JudgeTrainConfig:
    """Settings of ``grpo-bench pretrain judge``; the card stores them."""

    steps: int = 2400
    """Optimizer steps."""
    batch: int = 64
    """Videos per step (``base_share`` of them from base-model samples when there are any)."""
    lr: float = 2e-3
    """Peak AdamW learning rate (cosine decay to 5% after a 50-step warm-up)."""
    seed: int = 0
    """Seed of every random draw (rendering, corruptions, base-model sampling, initialisation)."""
    size: int = 16
    """Video height/width (16 or 24)."""
    base_videos: int = 4096
    """Base-model samples to train on (0: train on rendered videos only, e.g. without a base model)."""
    heldout_videos: int = 512
    """Held-out base-model samples (other seeds) for normalisation statistics and the Spearman check."""
    base_checkpoint: str = ""
    """Base-model weights to sample from (empty: the shipped world model)."""
    mismatch: float = 0.15
    """Share of training videos paired with a prompt that differs in one word."""
    width: int = 40
    """Judge width (JudgeConfig.width; 40 gives ~0.99M parameters)."""
    base_share: float = 0.75
    """Share of each batch drawn from the base-model samples (the rest: rendered and corrupted videos)."""
    rank_weight: float = 1.0
    """Weight of the pairwise ranking loss on TA among the base-model videos of each batch (0: off)."""
    threads: int = 1
    """CPU threads for torch (1 is fastest on a shared 2-core machine; 0 keeps torch's default)."""


def _check(cfg: JudgeTrainConfig) -> None:
    if cfg.size not in SIZES:
        raise UserError(f"judge video size must be one of {SIZES}, got {cfg.size!r}")
    for key in ("steps", "batch", "width"):
        if getattr(cfg, key) < 1:
            raise UserError(f"judge option {key!r} must be >= 1, got {getattr(cfg, key)!r}")
    if cfg.base_videos < 0 or cfg.heldout_videos < 0:
        raise UserError("judge options base_videos and heldout_videos must be >= 0")
    if cfg.rank_weight < 0 or cfg.rank_weight != cfg.rank_weight:
        raise UserError(f"judge option 'rank_weight' (--rank-weight) must be a number >= 0, got {cfg.rank_weight!r}")
    if not 0 <= cfg.base_share <= 1:
        raise UserError(f"judge option 'base_share' must be in [0, 1], got {cfg.base_share!r}")
    if not 0 <= cfg.mismatch <= 1:
        raise UserError(f"judge option 'mismatch' must be in [0, 1], got {cfg.mismatch!r}")


# --- data ----------------------------------------------------------------------------------------
def sample_base(n: int, size: int, seed: int, checkpoint: str = "", chunk: int = 64) -> tuple[Tensor, list[str]]:
    """n base-model videos Tensor[n, 3, 8, size, size] over all prompts, cycling through BASE_SAMPLERS."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.models import load

    kw = {"size": size}
    if checkpoint:
        kw["path"] = checkpoint
    model = load("world", **kw)
    rng = random.Random(seed)
    texts = all_prompts("all")
    videos, prompts = [], []
    for k, start in enumerate(range(0, n, chunk)):
        m = min(chunk, n - start)
        kernel_name, level, steps = BASE_SAMPLERS[k % len(BASE_SAMPLERS)]
        batch_prompts = [rng.choice(texts) for _ in range(m)]
        g = torch.Generator().manual_seed(seed * 100_003 + k)
        noise = torch.randn(m, *model.latent_shape, generator=g)
        x = sample(model, batch_prompts, noise, sigmas(steps, 3.0), make_kernel(kernel_name, level), generator=g)
        videos.append(model.decode(x).clamp(-1, 1).float())
        prompts += batch_prompts
    return torch.cat(videos), prompts


def _mismatch(prompts: list[str], share: float, rng: random.Random) -> list[str]:
    """Replace one word (colour, shape or motion) of a share of the prompts by another vocabulary word."""
    out = []
    for p in prompts:
        if rng.random() >= share:
            out.append(p)
            continue
        parts = list(parse(p))
        which = rng.randrange(3)
        vocab = (COLORS, SHAPES, MOTIONS)[which]
        parts[which] = rng.choice([i for i in range(len(vocab)) if i != parts[which]])
        out.append(prompt_text(COLORS[parts[0]], SHAPES[parts[1]], MOTIONS[parts[2]]))
    return out


_OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}


def mirror(videos: Tensor, prompts: list[str], rng: random.Random) -> tuple[Tensor, list[str]]:
    """Label-preserving augmentation of sampled videos: a left-right flip and/or time reversal, with the
    prompt's motion changed to match (the world is symmetric under both; targets are re-scored anyway)."""
    videos, prompts = videos.clone(), list(prompts)
    for i, p in enumerate(prompts):
        motion = p.split()[-1]
        flip, reverse = rng.random() < 0.5, rng.random() < 0.5
        if flip:
            videos[i] = videos[i].flip(-1)
            motion = {"left": "right", "right": "left"}.get(motion, motion)
        if reverse:
            videos[i] = videos[i].flip(1)
            motion = _OPPOSITE[motion]
        prompts[i] = p.rsplit(" ", 1)[0] + " " + motion
    return videos, prompts


def synthetic_batch(n: int, size: int, rng: random.Random) -> tuple[Tensor, list[str]]:
    """n rendered videos: clean, corrupted once or twice (random strength), or partially re-noised."""
    texts = all_prompts("all")
    prompts = [rng.choice(texts) for _ in range(n)]
    videos = render(prompts, rng.randrange(2**31), size=size)
    names = CORRUPTIONS.names()
    out = []
    for lo in range(0, n, 8):  # corruptions act on groups of 8 (one kind and strength per group)
        v = videos[lo:lo + 8]
        kind = rng.random()
        if kind < 0.15:
            pass  # clean
        elif kind < 0.75:
            for _ in range(1 if kind < 0.6 else 2):
                v = CORRUPTIONS.get(rng.choice(names))(v, rng.random() ** 1.5, rng.randrange(2**31))
        else:
            s = rng.random() * 0.6
            g = torch.Generator().manual_seed(rng.randrange(2**31))
            v = ((1 - s) * v + s * torch.randn(v.shape, generator=g)).clamp(-1, 1)
        out.append(v)
    return torch.cat(out), prompts


def targets(videos: Tensor, prompts: list[str]) -> Tensor:
    """Regression targets Tensor[B, 3 + len(AUXILIARY) + 3]: the oracle's (vq, mq, ta) and sub-scores, as
    logs (floored at LOG_FLOOR) for those in LOG_TARGETS, then the fitted (colour, shape, direction)
    classes as floats.

    Logs for VQ and MQ, because base-model videos crowd into a small range of them (e.g. VQ 0.005-0.3)
    where a squared error on the score itself barely cares about order; the log spreads that range evenly
    (each score is a product of sub-scores, so its log is a sum). TA stays linear: on base-model videos it
    lives near 1, and in log space the zeros of mismatched prompts would dominate the loss (measured:
    Spearman 0.47 with log TA vs 0.80 linear). Spearman is unchanged by either monotone map."""
    o = oracle(videos, prompts)
    ft = fit(videos)
    direction = (ft.velocity @ direction_vectors().T).argmax(1)
    classes = torch.stack([ft.color, ft.shape, direction], 1).float()
    scores = torch.stack([o[k] for k in DIMENSIONS + AUXILIARY], 1)
    logged = torch.tensor([k in LOG_TARGETS for k in DIMENSIONS + AUXILIARY])
    scores = torch.where(logged, scores.clamp(min=math.exp(LOG_FLOOR)).log(), scores)
    return torch.cat([scores, classes], 1)


def ranking_loss(score: Tensor, target: Tensor, margin: float = 0.02, sharpness: float = 5.0) -> Tensor:
    """Pairwise logistic (RankNet) loss: for every pair whose targets differ by more than ``margin``,
    softplus(-sharpness * sign(t_i - t_j) * (s_i - s_j)); mean over such pairs. score, target: Tensor[n].

    Base-model videos crowd into a narrow band of TA (median 0.86, IQR 0.71-0.92) where the regression
    loss, dominated by the large errors of corrupted and mismatched videos, barely shapes the order;
    the Spearman check (and GRPO, which only sees differences within a group) is about that order."""
    ds = score[:, None] - score[None, :]  # [n, n]
    dt = target[:, None] - target[None, :]
    pairs = (dt.abs() > margin).float()
    loss = torch.nn.functional.softplus(-torch.sign(dt) * ds * sharpness) * pairs
    return loss.sum() / pairs.sum().clamp(min=1)


def judge_loss(pred: Tensor, y: Tensor) -> Tensor:
    """Weighted MSE on the three scores, plus AUX_WEIGHT x (MSE on the sub-scores + cross-entropy on the classes).
    The three scores are what the judge is for; the rest only shapes its features."""
    n, a = len(DIMENSIONS), len(AUXILIARY)
    err = (pred[:, :n] - y[:, :n]) ** 2
    loss = (err * SCORE_WEIGHTS).sum(1).mean() / SCORE_WEIGHTS.sum() + AUX_WEIGHT * ((pred[:, n:n + a] - y[:, n:n + a]) ** 2).mean()
    classes = y[:, n + a:].long()
    for i, logits in enumerate(pred[:, n + a:].split(PARTS, dim=1)):
        loss = loss + AUX_WEIGHT / len(PARTS) * torch.nn.functional.cross_entropy(logits, classes[:, i])
    return loss


# --- evaluation ----------------------------------------------------------------------------------
@torch.no_grad()
def raw_scores(net: WorldJudge, videos: Tensor, prompts: list[str], chunk: int = 256) -> Tensor:
    """The judge's raw (un-normalised) heads Tensor[B, 3]."""
    net.eval()
    out = [net(videos[i:i + chunk], net.condition(prompts[i:i + chunk])) for i in range(0, len(prompts), chunk)]
    return torch.cat(out)


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman rank correlation of two Tensor[N] (average ranks for ties)."""
    from scipy.stats import spearmanr

    r = spearmanr(a.double().numpy(), b.double().numpy()).statistic
    return float(r) if math.isfinite(r) else 0.0


def correlations(net: WorldJudge, videos: Tensor, prompts: list[str], truth: Tensor | None = None) -> dict[str, float]:
    """Spearman per dimension between the judge and the oracle on the given videos."""
    truth = targets(videos, prompts)[:, : len(DIMENSIONS)] if truth is None else truth
    pred = raw_scores(net, videos, prompts)
    return {k: round(spearman(pred[:, i], truth[:, i]), 4) for i, k in enumerate(DIMENSIONS)}


# --- training ------------------------------------------------------------------------------------
def train_judge(cfg: JudgeTrainConfig, out: Path | None = None, command: str = "", console=None) -> dict:
    """Train, normalise, evaluate and save the judge; returns the card (also written next to the weights)."""
    _check(cfg)
    out = Path(out) if out is not None else DEFAULT_WEIGHTS
    t0 = time.time()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    log = console.print if console is not None else (lambda *a, **k: None)

    base_v, base_p, held_v, held_p = None, None, None, None
    if cfg.base_videos or cfg.heldout_videos:
        log(f"sampling {cfg.base_videos} + {cfg.heldout_videos} base-model videos ...")
        total = cfg.base_videos + cfg.heldout_videos
        videos, prompts = sample_base(total, cfg.size, cfg.seed, cfg.base_checkpoint)
        # Held-out samples come from their own chunks (other noise seeds), never seen in training.
        base_v, base_p = videos[:cfg.base_videos], prompts[:cfg.base_videos]
        held_v, held_p = videos[cfg.base_videos:], prompts[cfg.base_videos:]
    t_data = time.time() - t0

    net = WorldJudge(JudgeConfig(width=cfg.width, size=cfg.size))
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=1e-4)
    warm = min(50, cfg.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps)))))
    n_base = round(cfg.batch * cfg.base_share) if base_v is not None and len(base_p) else 0
    losses = []
    net.train()
    for step in range(cfg.steps):
        v, p = synthetic_batch(cfg.batch - n_base, cfg.size, rng)
        if n_base:
            idx = [rng.randrange(len(base_p)) for _ in range(n_base)]
            bv, bp = mirror(base_v[idx], [base_p[i] for i in idx], rng)
            v = torch.cat([v, bv])
            p = p + bp
        p = _mismatch(p, cfg.mismatch, rng)
        y = targets(v, p)
        pred = net(v, net.condition(p), auxiliary=True)
        loss = judge_loss(pred, y)
        if n_base and cfg.rank_weight:  # the base-model rows are the last n_base of the batch
            loss = loss + cfg.rank_weight * ranking_loss(pred[-n_base:, 2], y[-n_base:, 2])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if console is not None and (step % 100 == 0 or step == cfg.steps - 1):
            log(f"step {step:5d}  loss {sum(losses[-100:]) / len(losses[-100:]):.5f}  {time.time() - t0:.0f}s")
    t_train = time.time() - t0 - t_data

    # z-normalisation over base-model samples (VideoAlign-style); rendered videos when there are none.
    if held_v is not None and len(held_p):
        norm_v, norm_p, norm_from = held_v, held_p, "held-out base-model samples"
    else:
        norm_v, norm_p = synthetic_batch(512, cfg.size, random.Random(cfg.seed + 1))
        norm_from = "rendered and corrupted videos (no base-model samples)"
    raw = raw_scores(net, norm_v, norm_p)
    net.mean.copy_(raw.mean(0))
    net.std.copy_(raw.std(0).clamp(min=1e-6))

    held_synth = synthetic_batch(256, cfg.size, random.Random(cfg.seed + 2))
    card = {
        "command": command or _command(cfg, out),
        "seed": cfg.seed,
        "steps": cfg.steps,
        "config": asdict(cfg),
        "parameters": sum(p.numel() for p in net.parameters()),
        "wall_time_s": None,
        "data_time_s": round(t_data, 1),
        "train_time_s": round(t_train, 1),
        "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 6),
        "normalised_over": f"{len(norm_p)} {norm_from}",
        "norm_mean": [round(float(x), 6) for x in net.mean],
        "norm_std": [round(float(x), 6) for x in net.std],
        "spearman_heldout_base": correlations(net, held_v, held_p) if held_v is not None and len(held_p) > 2 else None,
        "spearman_heldout_rendered": correlations(net, *held_synth),
        "heldout_base_videos": len(held_p) if held_p is not None else 0,
    }
    card["wall_time_s"] = round(time.time() - t0, 1)
    save_judge(net, out, extra={"card": card_path(out).name})
    write_card(out, card)
    log(json.dumps({k: card[k] for k in ("wall_time_s", "spearman_heldout_base", "spearman_heldout_rendered")}))
    return card


def _command(cfg: JudgeTrainConfig, out: Path) -> str:
    """The CLI command that reproduces this run."""
    cmd = (f"grpo-bench pretrain judge --steps {cfg.steps} --seed {cfg.seed} --size {cfg.size} "
           f"--base-videos {cfg.base_videos} --heldout-videos {cfg.heldout_videos}")
    if cfg.base_checkpoint:
        cmd += f" --base-checkpoint {cfg.base_checkpoint}"
    if cfg.rank_weight != JudgeTrainConfig.rank_weight:
        cmd += f" --rank-weight {cfg.rank_weight:g}"
    return cmd if Path(out).resolve() == DEFAULT_WEIGHTS.resolve() else f"{cmd} --out {out}"


def card_path(weights: Path) -> Path:
    return Path(weights).with_suffix(".json")


def write_card(weights: Path, card: dict) -> None:
    path = card_path(weights)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    tmp.replace(path)
