"""Evaluation of a policy on the held-out eval prompts: ODE sampling with FIXED noise.

The noise comes from the run seed alone (stream 'eval'), so every method and every eval point
of a seed sees the same noise and videos pair across methods by (prompt, sample, seed). Scores:
the training reward (the judge) under the run's setting, and, with ``eval_oracle`` (world
prompts), the exact world oracle (vq, mq, ta, correct, manifold, in-group diversity).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.core.rollout import generator, sample_ode
from grpo_bench.rewards.base import composite, reward_weights


def _mean(t: Tensor) -> float:
    t = t.detach().float()
    return float(t[torch.isfinite(t)].mean()) if torch.isfinite(t).any() else float("nan")


def evaluate(model: Any, reward: Any, sigmas: Tensor, cfg: Any, device: torch.device, autocast: Any) -> tuple[dict, list, Tensor]:
    """(eval_* metrics, per-video rows, videos Tensor[N, 3, F, H, W] on CPU)."""
    from grpo_bench.train.prompts import load_prompt_set
    from grpo_bench.world.oracle import diversity, oracle

    n = cfg.eval_samples
    rows = [p for p in load_prompt_set(cfg.prompts).eval for _ in range(n)]
    gen = generator(cfg.seed, "eval", 0, device)
    x0 = torch.randn(len(rows), *model.latent_shape, generator=gen, device=device)
    with autocast():
        videos = sample_ode(model, sigmas, rows, x0, guidance=cfg.guidance, chunk=cfg.prompts_per_update * cfg.group_size)
    videos = videos.cpu()
    with torch.no_grad():
        judged = reward(videos, rows)
        # No oracle for real models: their oracle columns are NaN (the report leaves them blank).
        nan = torch.full((len(rows),), float("nan"))
        truth = oracle(videos, rows) if cfg.eval_oracle else dict.fromkeys(("vq", "mq", "ta", "correct", "manifold"), nan)
        judge = composite(judged, reward_weights(reward, cfg.setting)).cpu()
    metrics = {
        "eval_oracle_vq": _mean(truth["vq"]),
        "eval_oracle_mq": _mean(truth["mq"]),
        "eval_oracle_ta": _mean(truth["ta"]),
        "eval_correct": _mean(truth["correct"]),
        "eval_manifold": _mean(truth["manifold"]),
        "eval_diversity": _mean(diversity(videos, n)) if n >= 2 else float("nan"),
        "eval_reward": _mean(judge),
        **{f"eval_reward_{k}": _mean(judged[k]) for k in ("vq", "mq", "ta") if k in judged},
    }
    per_video = [
        {
            "prompt": p, "sample": j % n, "seed": int(cfg.seed),
            "oracle_vq": float(truth["vq"][j]), "oracle_mq": float(truth["mq"][j]), "oracle_ta": float(truth["ta"][j]),
            "correct": float(truth["correct"][j]), "manifold": float(truth["manifold"][j]), "judge_reward": float(judge[j]),
        }
        for j, p in enumerate(rows)
    ]
    return metrics, per_video, videos
