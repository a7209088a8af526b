"""Evaluation of a policy on the held-out eval prompts: ODE sampling with FIXED noise.

The noise comes from the run seed alone (stream 'eval'), so every method and every eval point
of a seed sees the same noise and videos pair across methods by (prompt, sample, seed). Scores:
the training reward (the judge) under the run's setting, in-group diversity, and, with ``eval_oracle``
(world prompts), the exact world oracle (vq, mq, ta, correct, manifold) from the reward registry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_bench.config import metrics as m
from grpo_bench.core.rollout import generator
from grpo_bench.core.sampling import sample
from grpo_bench.core.sde import make_kernel
from grpo_bench.rewards.base import composite, declaration, reward_weights


@dataclass
class EvalResult:
    """One evaluation of the current policy (the evaluate phase)."""

    metrics: dict[str, float]  # eval_* (metrics.py), over every eval video of every rank
    videos_rows: list[dict[str, Any]]  # [N] per video: prompt, sample, seed, oracle and judge scores
    videos: Tensor  # [n, 3, F, H, W] this rank's share of the N videos, on CPU
    time_eval: float  # seconds

    def line(self, at: int) -> dict[str, Any]:
        """Its part of a metrics line; ``at``: the number of updates the evaluated policy had."""
        return {**self.metrics, m.TIME_EVAL: self.time_eval, m.EVAL_AT: at}


def _mean(t: Tensor) -> float:
    t = t.detach().float()
    return float(t[torch.isfinite(t)].mean()) if torch.isfinite(t).any() else float("nan")


def prompt_shard(n_prompts: int, rank: int, world: int) -> slice:
    """This rank's contiguous share of the eval prompts (whole prompts, so a prompt's samples and
    their diversity stay on one rank; shares differ by at most one prompt)."""
    base, extra = divmod(n_prompts, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


def gather_rows(local: Tensor, acc: Any, counts: list[int]) -> Tensor:
    """Every rank's rows of ``local`` (Tensor[n_r, ...], n_r = counts[rank]) in rank order, on every rank:
    padded to the largest share for the collective, then trimmed."""
    if acc is None or acc.num_processes == 1:
        return local
    most = max(counts)
    pad = local.new_full((most - local.shape[0], *local.shape[1:]), float("nan"))
    every = acc.gather(torch.cat([local, pad]).to(acc.device).contiguous()).cpu()
    every = every.reshape(len(counts), most, *local.shape[1:])
    return torch.cat([every[r, :c] for r, c in enumerate(counts)])


def exact_oracle(prompt_set: str) -> Any:
    """The exact scorer behind ``eval_oracle``: the reward that declares ground truth for the eval prompts
    (rewards/__init__.py ``register(..., ground_truth_for=...)``); a prompt file has none of its own and is
    scored by the video world's oracle (config validation requires world eval prompts there)."""
    from grpo_bench.rewards import declares_ground_truth, ground_truth
    from grpo_bench.world.roles import video_world

    return ground_truth(prompt_set if declares_ground_truth(prompt_set) else video_world().prompts)


def diversity(videos: Tensor, group_size: int) -> Tensor:
    """In-group diversity Tensor[B // group_size]: mean pairwise RMS distance between the videos of each
    consecutive group of ``group_size`` (in [-1, 1] units; 0 when a group's videos are identical)."""
    b = videos.shape[0]
    if group_size < 2 or b % group_size:
        raise ValueError(f"group_size must be >= 2 and divide the batch ({b}), got {group_size}")
    x = videos.detach().float().reshape(b // group_size, group_size, -1)
    dist = torch.cdist(x, x) / math.sqrt(x.shape[-1])  # [G, n, n] RMS distances
    n = group_size
    return dist.sum((1, 2)) / (n * (n - 1))


@dataclass(frozen=True)
class EvalOptions:
    """What an evaluation reads of the run (its section: ``section(cfg, EvalOptions)``, config/sections.py)."""

    prompts: str  # the prompt set whose eval prompts are sampled
    eval_samples: int  # samples per eval prompt
    seed: int  # the fixed eval noise's seed
    guidance: float
    guidance_formula: str
    prompts_per_update: int  # with group_size: the sampling chunk (the rollout's batch)
    group_size: int
    eval_oracle: bool  # score with the prompt set's exact oracle
    setting: str  # the reward weights of the judge's composite


def evaluate(model: Any, reward: Any, sigmas: Tensor, cfg: EvalOptions, device: torch.device, autocast: Any,
             acc: Any = None, even_only: bool = False) -> tuple[dict, list, Tensor]:
    """(eval_* metrics, per-video rows, videos Tensor[N, 3, F, H, W] on CPU).

    Under several processes (``acc``) each rank samples and scores its share of the eval prompts
    (``prompt_shard``) with the same fixed noise rows as one process would, and the per-video scores
    are gathered, so the metrics equal the single-process ones and the work is not repeated. The
    videos returned are this rank's own (the main process's share: it saves them). ``even_only`` (FSDP2:
    every forward is a collective, so all ranks must run as many) splits only when the prompts divide
    evenly over the ranks; otherwise every rank samples all of them, as one process would."""
    from grpo_bench.config.prompts import load_prompt_set

    n = cfg.eval_samples
    prompts = load_prompt_set(cfg.prompts).eval
    all_rows = [p for p in prompts for _ in range(n)]
    gen = generator(cfg.seed, "eval", 0, device)
    x0 = torch.randn(len(all_rows), *model.latent_shape, generator=gen, device=device)  # the same noise on every rank
    if acc is not None and even_only and len(prompts) % acc.num_processes:
        acc = None  # uneven shares would desynchronise the sharded forwards: repeat instead
    world, rank = (acc.num_processes, acc.process_index) if acc is not None else (1, 0)
    share = prompt_shard(len(prompts), rank, world)
    counts = [(s.stop - s.start) * n for s in (prompt_shard(len(prompts), r, world) for r in range(world))]
    rows = all_rows[share.start * n : share.stop * n]
    x0 = x0[share.start * n : share.stop * n]
    with autocast():
        videos = sample(model, rows, x0, sigmas, make_kernel("ode"), guidance=cfg.guidance,
                        chunk=cfg.prompts_per_update * cfg.group_size, decode=True,
                        formula=cfg.guidance_formula) \
            if rows else x0.new_zeros(0, 3, 1, 1, 1)
    videos = videos.cpu()
    with torch.no_grad():
        judged = reward(videos, rows) if rows else {}
        nan = torch.full((len(rows),), float("nan"))
        # No oracle for real models: their oracle columns are NaN (the report leaves them blank).
        blank = dict.fromkeys(("vq", "mq", "ta", "correct", "manifold"), nan)
        truth = exact_oracle(cfg.prompts).ground_truth(videos, rows) if cfg.eval_oracle and rows else blank
        judged = judged or {d: nan for d in declaration(reward).dimensions}
        judge = composite(judged, reward_weights(reward, cfg.setting)).cpu()
        div = diversity(videos, n) if n >= 2 and rows else torch.full((len(rows) // max(n, 1),), float("nan"))
    per_prompt = [c // n for c in counts]
    truth = {k: gather_rows(v.float().cpu(), acc, counts) for k, v in truth.items()}
    judged = {k: gather_rows(v.float().cpu(), acc, counts) for k, v in judged.items()}
    judge = gather_rows(judge.float(), acc, counts)
    div = gather_rows(div.float().cpu(), acc, per_prompt)
    rows = all_rows
    metrics = {
        m.EVAL_ORACLE_VQ: _mean(truth["vq"]),
        m.EVAL_ORACLE_MQ: _mean(truth["mq"]),
        m.EVAL_ORACLE_TA: _mean(truth["ta"]),
        m.EVAL_CORRECT: _mean(truth["correct"]),
        m.EVAL_MANIFOLD: _mean(truth["manifold"]),
        m.EVAL_DIVERSITY: _mean(div) if n >= 2 else float("nan"),
        m.EVAL_REWARD: _mean(judge),
        **{m.eval_reward_part(k): _mean(judged[k]) for k in m.REWARD_PARTS if k in judged},
    }
    per_video = [
        {
            "prompt": p,
            "sample": j % n,
            "seed": int(cfg.seed),
            "oracle_vq": float(truth["vq"][j]),
            "oracle_mq": float(truth["mq"][j]),
            "oracle_ta": float(truth["ta"][j]),
            "correct": float(truth["correct"][j]),
            "manifold": float(truth["manifold"][j]),
            "judge_reward": float(judge[j]),
        }
        for j, p in enumerate(rows)
    ]
    return metrics, per_video, videos
