"""The collect phase of one GRPO update (docs/design.md §3): prompts and initial noise from (seed, u)
alone, so every method sees the same ones; the rollout of this process's rows; rewards gathered
over the whole batch; group advantages.

``collect(policy, reward, method, prompts, seed, u, spec, shard)`` takes what it uses: the sampling
policy (``RolloutPolicy``: the generator, its step table and the anchors it evaluates), the reward, the
method, the training prompts, the run seed and update index, how the batch is drawn and ranked
(``GroupSpec``, from the run config) and this process's share (``Shard``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_bench.config import metrics as m
from grpo_bench.core.advantages import AdvantageRule, group_advantages, group_std
from grpo_bench.core.anchors import Anchors
from grpo_bench.core.method import Method
from grpo_bench.core.rollout import Rollout, StepTable, generator, initial_noise, rollout
from grpo_bench.rewards.base import composite, reward_weights
from grpo_bench.train import distributed
from grpo_bench.train.clock import clock
from grpo_bench.train.compute import Compute
from grpo_bench.train.microbatch import WithVelocity, chunked


@dataclass(frozen=True)
class GroupSpec:
    """How one update's batch is drawn and ranked: P prompts x G rollouts, guidance, forwards of
    ``micro_batch`` rows, the setting's reward weights and the advantage rule (``section`` builds the nested
    rule from the same run config)."""

    prompts_per_update: int
    group_size: int
    guidance: float
    micro_batch: int
    setting: str
    advantages: AdvantageRule
    guidance_formula: str = "cfg"


@dataclass
class RolloutPolicy:
    """What samples an update's trajectories: the generator (behind micro-batching), the method's step table
    over ``sigmas``, the steps a rollout stores and the anchors whose means it stores."""

    sampler: Any  # the generator behind micro-batching (models/base.py VideoModel)
    sigmas: torch.Tensor  # [T+1] the schedule
    table: StepTable
    stored: torch.Tensor  # Long[S] the steps a rollout keeps
    anchors: Anchors
    latent_shape: tuple[int, ...]
    device: torch.device
    autocast: Callable[[], Any]  # the launch's compute precision


@dataclass(frozen=True)
class Shard:
    """This process's contiguous rows of the global batch, and the accelerator that gathers the rest."""

    acc: Any  # accelerate.Accelerator: process index, collectives
    rows: slice


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


def drawn_prompts(prompts: list[str], seed: int, u: int, count: int) -> list[str]:
    """The ``count`` distinct training prompts update ``u`` of a run with ``seed`` draws (its 'prompts' stream), so
    an analysis can recover which prompts each logged update scored."""
    order = torch.randperm(len(prompts), generator=generator(seed, "prompts", u))
    return [prompts[int(k)] for k in order[:count]]


def collect(policy: RolloutPolicy, reward: Any, method: Method, prompts: list[str], seed: int, u: int,
            spec: GroupSpec, shard: Shard, compute: Compute | None = None) -> RolloutBatch:
    """Sample, score and rank update u's P × G trajectories (this process's contiguous share of rows);
    ``compute`` counts the rollout's and the stored anchors' forwards (compute.py)."""
    P, G, dev = spec.prompts_per_update, spec.group_size, policy.device
    t0 = time.perf_counter()
    rows = [p for p in drawn_prompts(prompts, seed, u, P) for _ in range(G)]  # [P*G] group-major
    x0 = initial_noise(tuple(policy.latent_shape), P, G, method.config.shared_noise, generator(seed, "noise", u, dev))
    # A window schedule (method.update_steps) makes this update's SDE and trained steps a subset of the
    # static ones: the rollout samples the ODE outside it and stores only the steps inside it.
    active = method.update_steps(policy.sigmas, u, generator(seed, "window", u))
    table, stored = policy.table, policy.stored
    if active is not None:
        table = StepTable.build(method, policy.sigmas, dev, active=active)
        stored = stored[active[stored]]
    steps = method.train_steps(policy.sigmas, P * G, generator(seed, "steps", u), active=active)  # Long[P*G, K]
    mine = shard.rows  # data parallel: this process's rows of the global batch (all of it on one process)
    anchors, compute = policy.anchors, compute or Compute()
    sampler = policy.sampler
    if method.rollout_anchor is not None:  # the method samples from one of its anchors (an old policy)
        sampler = WithVelocity(sampler, chunked(anchors.velocity(method.rollout_anchor), spec.micro_batch))
    share = G if (method.share_prefix and method.config.shared_noise and mine.start % G == 0
                  and (mine.stop - mine.start) % G == 0) else 0
    with policy.autocast():
        ro = rollout(compute.view(sampler, m.COMPUTE_ROLLOUT), table, rows[mine], x0[mine],
                     guidance=spec.guidance, stored=stored, logprob=method.config.logprob,
                     sde_gen=generator(distributed.rank_seed(seed, shard.acc.process_index), "sde", u, dev),
                     anchors={a: compute.velocity(chunked(anchors.velocity(a), spec.micro_batch), m.COMPUTE_REFERENCE)
                              for a in anchors.stored_names},
                     train_steps=steps[mine], share_group=share, fresh_noise=not method.needs_logprob,
                     guidance_formula=spec.guidance_formula)
    t1 = clock(dev)
    with torch.no_grad():
        local = {k: v.detach().float().cpu() for k, v in reward(ro.videos, ro.prompts).items()}
    scores = distributed.gather_scores(local, shard.acc)  # every rank: the whole batch
    r = composite(scores, reward_weights(reward, spec.setting))  # [P*G]
    adv, bad = group_advantages(r, G, spec.advantages)
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
