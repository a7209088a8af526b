"""The collect phase of one GRPO update (docs/design.md §3): prompts and initial noise from (seed, u)
alone, so every method sees the same ones; the rollout of this process's rows; rewards gathered
over the whole batch; group advantages.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_bench.core.advantages import group_advantages, group_std
from grpo_bench.core.rollout import Rollout, generator, initial_noise, rollout
from grpo_bench.rewards.base import composite, reward_weights
from grpo_bench.train import distributed
from grpo_bench.train import metrics as m
from grpo_bench.train.microbatch import chunked
from grpo_bench.train.phase_inputs import PhaseInputs


@dataclass
class RolloutBatch:
    """One update's trajectories on this process (B rows of the P*G batch), scored, with advantages."""

    rollout: Rollout  # B trajectories: stored transitions x/x_next [B, S, C, F, H, W], logp_old [B, S], ...
    advantages: Tensor  # [B] group advantages of this process's rows, on the device
    train_steps: Tensor  # Long[B, K] the steps each row trains (CPU)
    reward: float  # nan-mean of the composite reward over the whole batch [P*G]
    reward_std_in_group: float  # mean over groups of the in-group std
    bad_rewards: int  # non-finite rewards in the whole batch
    adv_abs_mean: float  # mean |A| over the whole batch
    reward_parts: dict[str, float]  # 'vq' / 'mq' / 'ta' -> nan-mean, those the reward scores
    time_rollout: float  # seconds
    time_reward: float

    def metrics(self) -> dict[str, Any]:
        return {m.REWARD: self.reward, m.REWARD_STD_IN_GROUP: self.reward_std_in_group, m.BAD_REWARDS: self.bad_rewards,
                m.ADV_ABS_MEAN: self.adv_abs_mean, **{m.reward_part(k): v for k, v in self.reward_parts.items()}}


def collect(t: PhaseInputs, u: int) -> RolloutBatch:
    """Sample, score and rank update u's P × G trajectories (this process's contiguous share of rows)."""
    cfg, dev = t.cfg, t.device
    P, G, rank = cfg.prompts_per_update, cfg.group_size, t.acc.process_index
    t0 = time.perf_counter()
    order = torch.randperm(len(t.train_prompts), generator=generator(cfg.seed, "prompts", u))
    rows = [t.train_prompts[int(k)] for k in order[:P] for _ in range(G)]  # [P*G] group-major
    x0 = initial_noise(tuple(t.model.latent_shape), P, G, t.method.config.shared_noise,
                       generator(cfg.seed, "noise", u, dev))
    steps = t.method.train_steps(t.sigmas, P * G, generator(cfg.seed, "steps", u))  # Long[P*G, K]
    # Data parallel: this process's contiguous rows of the global batch (all of it on one process).
    mine = t.shard
    with t.autocast():
        ro = rollout(t.sampler, t.table, rows[mine], x0[mine], guidance=cfg.guidance,
                     stored=t.stored, logprob=t.method.config.logprob,
                     sde_gen=generator(distributed.rank_seed(cfg.seed, rank), "sde", u, dev),
                     anchors={a: chunked(t.anchors.velocity(a), cfg.micro_batch) for a in t.anchors.stored_names},
                     train_steps=steps[mine])
    t1 = m.clock(dev)
    with torch.no_grad():
        local = {k: v.detach().float().cpu() for k, v in t.reward(ro.videos, ro.prompts).items()}
    scores = distributed.gather_scores(local, t.acc)  # every rank: the whole batch
    r = composite(scores, reward_weights(t.reward, cfg.setting))  # [P*G]
    adv, bad = group_advantages(r, G, cfg.adv_clip, cfg.on_bad_reward, cfg.adv_norm)
    batch = RolloutBatch(rollout=ro, advantages=adv[mine].to(dev), train_steps=steps[mine], reward=_nanmean(r),
                         reward_std_in_group=group_std(r, G), bad_rewards=bad, adv_abs_mean=float(adv.abs().mean()),
                         reward_parts={k: _nanmean(scores[k]) for k in m.REWARD_PARTS if k in scores},
                         time_rollout=t1 - t0, time_reward=0.0)
    batch.time_reward = time.perf_counter() - t1
    return batch


def _nanmean(t: Tensor) -> float:
    t = t.double()
    ok = torch.isfinite(t)
    return float(t[ok].mean()) if ok.any() else math.nan
