"""Training of the world judge (``grpo-bench pretrain judge``): regress the oracle's VQ/MQ/TA.

Training videos mix four sources, each scored by the exact oracle on the fly:

* rendered videos, clean, damaged (one or two corruptions of ``world/corrupt.py`` of random strength, or
  shuffled frames) or partially re-noised (x = (1-s) x0 + s z, what an unfinished sampler leaves);
* base-model samples (``grpo_bench.models.load("world")``) drawn with the harness's own kernels (ODE and
  the SDE kernels RL rolls out with at several noise levels), from the base model and from copies with
  Gaussian noise on their weights (``PERTURB_SCALES``: stand-ins for where RL moves the model), a quarter
  of the groups damaged as above; sampled once before training;
* clean 10-step ODE base-model samples (the evaluation sampler), a fixed share of every batch;
* any of the above paired with a prompt that differs in one word, so TA must read the prompt.

The loss is a regression on the oracle's scores and sub-scores plus pairwise ranking losses on VQ, MQ
and TA among the clean ODE samples of each batch (``ranking_loss``): those crowd into narrow bands of
every score, where the regression (dominated by the large errors of damaged videos) barely shapes the
order, and GRPO only sees differences inside a group. ``--init`` fine-tunes an earlier judge; a judge
without frame statistics (``JudgeConfig.frame_stats``) is widened exactly (``start_from``).

After training the raw heads are z-normalised over held-out base-model samples (as VideoAlign's are) and
the judge is checked on fresh samples (``pretrain/judge_check.py``): Spearman with the oracle on 10-step ODE samples
of training and held-out prompts, and how often speckle and shuffled frames lower its score. The weights
go to a safetensors file and a JSON card with the command, seed, steps, wall time and those numbers.

The data are built in ``judge_data.py``, the targets and losses in ``judge_targets.py``.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from grpo_bench.errors import UserError
from grpo_bench.pretrain.judge_data import PERTURB_SCALES, damage, mirror, mismatched, sample_base, synthetic_batch
from grpo_bench.pretrain.judge_targets import correlations, judge_loss, ranking_loss, raw_scores, targets
from grpo_bench.rewards.world_judge import DEFAULT_WEIGHTS, JudgeConfig, WorldJudge, save_judge
from grpo_bench.world.generator import SIZES

RANK_MARGINS = (0.05, 0.05, 0.02)  # (log vq, log mq, ta): pairs closer than this are not ranked


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
    """Weight of the pairwise ranking losses on VQ, MQ and TA among the clean ODE samples of each batch (0: off)."""
    ode_videos: int = 2048
    """Clean 10-step ODE base-model samples (the evaluation sampler) to train on, besides ``base_videos``."""
    ode_share: float = 0.375
    """Share of each batch drawn from the clean ODE samples (part of ``base_share``); the ranking losses use them."""
    perturb: bool = True
    """Draw the mixed base-model samples also from noise-perturbed copies of the base model (PERTURB_SCALES)."""
    check_per_prompt: int = 8
    """Fresh 10-step ODE samples per training prompt for the card's check (``judge_check``; 4x per held-out prompt)."""
    frame_stats: bool = True
    """Give the judge frame-statistics features (JudgeConfig.frame_stats)."""
    init: str = ""
    """Judge weights to start from (empty: random initialisation); the card records their card and sha256."""
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
    if not 0 <= cfg.ode_share <= cfg.base_share:
        raise UserError(f"judge option 'ode_share' must be in [0, base_share={cfg.base_share}], got {cfg.ode_share!r}")
    if not cfg.lr > 0:
        raise UserError(f"judge option 'lr' (--lr) must be a number > 0, got {cfg.lr!r}")
    if cfg.check_per_prompt < 0:
        raise UserError(f"judge option 'check_per_prompt' must be >= 0, got {cfg.check_per_prompt!r}")
    if cfg.ode_videos < 0:
        raise UserError(f"judge option 'ode_videos' must be >= 0, got {cfg.ode_videos!r}")
    if cfg.init and not Path(cfg.init).is_file():
        raise UserError(f"judge option 'init' (--init): weights file {cfg.init} not found")
    if not 0 <= cfg.mismatch <= 1:
        raise UserError(f"judge option 'mismatch' must be in [0, 1], got {cfg.mismatch!r}")


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

    base_v, base_p, held_v, held_p, ode_v, ode_p = None, None, None, None, None, None
    if cfg.base_videos or cfg.heldout_videos:
        log(f"sampling {cfg.base_videos} + {cfg.heldout_videos} base-model videos ...")
        perturb = PERTURB_SCALES if cfg.perturb else (0.0,)
        base_v, base_p = sample_base(cfg.base_videos, cfg.size, cfg.seed, cfg.base_checkpoint, perturb=perturb)
        # Held-out samples: another seed, never seen in training, from the base model itself (they set
        # the z-normalisation, so 0 stays a typical base-model video).
        held_v, held_p = sample_base(cfg.heldout_videos, cfg.size, cfg.seed + 20_000, cfg.base_checkpoint)
    if cfg.ode_videos:
        log(f"sampling {cfg.ode_videos} clean 10-step ODE base-model videos ...")
        ode_v, ode_p = sample_base(cfg.ode_videos, cfg.size, cfg.seed + 10_000, cfg.base_checkpoint,
                                   samplers=(("ode", 0.0, 10),))
    t_data = time.time() - t0

    net = WorldJudge(JudgeConfig(width=cfg.width, size=cfg.size, frame_stats=cfg.frame_stats))
    if cfg.init:
        net = start_from(cfg.init, net)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=1e-4)
    warm = min(50, cfg.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps)))),
    )
    n_ode = round(cfg.batch * cfg.ode_share) if ode_v is not None else 0
    n_base = round(cfg.batch * cfg.base_share) - n_ode if base_v is not None and len(base_p) else 0
    n_base = max(0, n_base)
    losses = []
    net.train()
    for step in range(cfg.steps):
        v, p = synthetic_batch(cfg.batch - n_base - n_ode, cfg.size, rng)
        for pool_v, pool_p, n, damaged in ((base_v, base_p, n_base, True), (ode_v, ode_p, n_ode, False)):
            if not n:
                continue
            idx = [rng.randrange(len(pool_p)) for _ in range(n)]
            bv, bp = mirror(pool_v[idx], [pool_p[i] for i in idx], rng)
            if damaged and rng.random() < 0.25:  # what RL's drift adds: speckle, jitter, shuffled frames, ...
                k = min(8, n)
                bv = torch.cat([damage(bv[:k], rng), bv[k:]])
            v = torch.cat([v, bv])
            p = p + bp
        p = mismatched(p, cfg.mismatch, rng)
        y = targets(v, p)
        pred = net(v, net.condition(p), auxiliary=True)
        loss = judge_loss(pred, y)
        # The clean ODE rows are the last n_ode of the batch (the base rows when there are none).
        n_rank = n_ode or n_base
        if n_rank and cfg.rank_weight:
            for d, margin in enumerate(RANK_MARGINS):
                loss = loss + cfg.rank_weight * ranking_loss(pred[-n_rank:, d], y[-n_rank:, d], margin=margin)
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
    if cfg.init:
        card["init"] = _init_record(cfg.init)
    if cfg.check_per_prompt and cfg.base_videos + cfg.heldout_videos + cfg.ode_videos:
        from grpo_bench.pretrain.judge_check import check_judge

        card["check"] = check_judge(net.score, cfg.check_per_prompt, 4 * cfg.check_per_prompt, cfg.size,
                                    checkpoint=cfg.base_checkpoint)
    card["wall_time_s"] = round(time.time() - t0, 1)
    save_judge(net, out, extra={"card": card_path(out).name})
    write_card(out, card)
    shown = ("wall_time_s", "spearman_heldout_base", "spearman_heldout_rendered", "check")
    log(json.dumps({k: card.get(k) for k in shown}))
    return card


def start_from(init: str, net: WorldJudge) -> WorldJudge:
    """``net`` with the weights of the judge at ``init``. A judge without frame statistics can start one with
    them: the trunk's new input columns start at zero, so the widened judge computes exactly the old one."""
    from dataclasses import replace

    from grpo_bench.rewards.world_judge import load_judge

    start = load_judge(init)
    if replace(start.cfg, frame_stats=net.cfg.frame_stats) != net.cfg or (start.cfg.frame_stats and
                                                                          not net.cfg.frame_stats):
        raise UserError(f"judge option 'init': {init} has config {start.cfg}, this run needs {net.cfg}")
    state = start.state_dict()
    key = "trunk.0.weight"
    grown = torch.zeros_like(net.state_dict()[key])
    grown[:, : state[key].shape[1]] = state[key]
    state[key] = grown
    net.load_state_dict(state)
    return net


def _command(cfg: JudgeTrainConfig, out: Path) -> str:
    """The CLI command that reproduces this run."""
    cmd = (f"grpo-bench pretrain judge --steps {cfg.steps} --seed {cfg.seed} --size {cfg.size} "
           f"--base-videos {cfg.base_videos} --heldout-videos {cfg.heldout_videos}")
    if cfg.base_checkpoint:
        cmd += f" --base-checkpoint {cfg.base_checkpoint}"
    if cfg.rank_weight != JudgeTrainConfig.rank_weight:
        cmd += f" --rank-weight {cfg.rank_weight:g}"
    if cfg.lr != JudgeTrainConfig.lr:
        cmd += f" --lr {cfg.lr:g}"
    if cfg.ode_share != JudgeTrainConfig.ode_share:
        cmd += f" --ode-share {cfg.ode_share:g}"
    if cfg.ode_videos != JudgeTrainConfig.ode_videos:
        cmd += f" --ode-videos {cfg.ode_videos}"
    if cfg.check_per_prompt != JudgeTrainConfig.check_per_prompt:
        cmd += f" --check-per-prompt {cfg.check_per_prompt}"
    if cfg.init:
        cmd += f" --init {cfg.init}"
    return cmd if Path(out).resolve() == DEFAULT_WEIGHTS.resolve() else f"{cmd} --out {out}"


def _init_record(init: str) -> dict:
    """What a fine-tuning run started from: the file's name, sha256 and its own card (when it has one)."""
    import hashlib

    path = Path(init)
    card = card_path(path)
    return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "card": json.loads(card.read_text()) if card.is_file() else None}


def card_path(weights: Path) -> Path:
    return Path(weights).with_suffix(".json")


def write_card(weights: Path, card: dict) -> None:
    from grpo_bench.atomic import atomic_write_text, strict_json

    atomic_write_text(card_path(weights), strict_json(card, indent=2) + "\n")
