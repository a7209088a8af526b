"""Group-normalised advantages (docs/design.md §3).

    A_j = (r_j - mean_group(r)) / (std(r) + 1e-6),  clipped to ±adv_clip,

per prompt group of G rollouts (rows p*G .. p*G+G-1), by an ``AdvantageRule``. The std is the rule's
``adv_norm`` (``ADV_NORMS``): the group's population std ('group', SAGE-GRPO), its unbiased std
('group_unbiased', DanceGRPO's torch.std) or the population std of the whole batch ('global', FlowGRPO's
global_std). A group whose rewards are all equal gets exactly zero advantages (not 1-ulp noise divided by
1e-6). A non-finite reward is a UserError unless the rule's ``on_bad_reward == 'zero'``: then that sample
gets A = 0 and the group's statistics use its finite rewards only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_bench.errors import UserError, unknown

STD_EPS = 1e-6


def _group_std(dev: Tensor, n: Tensor, finite: Tensor, unbiased: bool) -> Tensor:
    """[P, 1] per-group std of the finite deviations dev: [P, G] (n: [P, 1] finite counts)."""
    ss = torch.where(finite, dev, torch.zeros_like(dev)).pow(2).sum(1, keepdim=True)
    return (ss / ((n - 1).clamp(min=1) if unbiased else n)).sqrt()


def _batch_std(r: Tensor, finite: Tensor) -> Tensor:
    """[1, 1] population std of all finite rewards of the batch r: [P, G] (about the batch mean)."""
    vals = r[finite]
    return vals.new_zeros(1, 1) if vals.numel() == 0 else vals.std(unbiased=False).reshape(1, 1)


ADV_NORMS = ("group", "group_unbiased", "global")
"""The advantage scales an ``AdvantageRule`` allows (its ``adv_norm``)."""
ON_BAD_REWARD = ("error", "zero")
"""What a non-finite reward may do (its ``on_bad_reward``): stop the run, or give that sample A = 0."""


@dataclass(frozen=True)
class AdvantageRule:
    """How a batch's rewards become advantages: the clip to ±``adv_clip``, what a non-finite reward does
    (``on_bad_reward``) and the std that scales them (``adv_norm``). The fields are named as the run's keys of
    its optimisation section, so a trainer builds the rule from that section; the rule checks its values when
    built (one line naming the key and the allowed values), before any reward is computed."""

    adv_clip: float = 5.0
    on_bad_reward: str = "error"
    adv_norm: str = "group"

    def __post_init__(self) -> None:
        clip = self.adv_clip
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip <= 0:
            raise UserError(f"advantage rule: key 'adv_clip' must be a finite number > 0, got {clip!r}")
        if self.on_bad_reward not in ON_BAD_REWARD:
            raise unknown("on_bad_reward", self.on_bad_reward, ON_BAD_REWARD, "advantage rule: ")
        if self.adv_norm not in ADV_NORMS:
            raise unknown("adv_norm", self.adv_norm, ADV_NORMS, "advantage rule: ")


DEFAULT_RULE = AdvantageRule()
"""Population std per group, clip ±5, a non-finite reward stops the run (SAGE-GRPO's rule)."""


def group_advantages(rewards: Tensor, group_size: int, rule: AdvantageRule = DEFAULT_RULE) -> tuple[Tensor, int]:
    """(A: Tensor[B] float32, number of non-finite rewards) for rewards: Tensor[B], B = P*G, by ``rule``."""
    r = rewards.detach().double().reshape(-1, group_size)  # [P, G], float64: exact zeros below
    finite = torch.isfinite(r)
    bad = int((~finite).sum())
    if bad and rule.on_bad_reward != "zero":
        raise UserError(
            f"the reward returned {bad} non-finite value(s) (NaN/inf); fix the reward or set on_bad_reward=zero"
        )
    n = finite.sum(1, keepdim=True).clamp(min=1)  # [P, 1]
    r0 = torch.where(finite, r, torch.zeros_like(r))
    mean = r0.sum(1, keepdim=True) / n
    if rule.adv_norm == "global":
        std = _batch_std(r, finite)
    else:
        std = _group_std(r - mean, n, finite, unbiased=rule.adv_norm == "group_unbiased")
    adv = (r0 - mean) / (std + STD_EPS)
    # Equal rewards (or fewer than two finite ones) carry no signal: exactly zero.
    lo = torch.where(finite, r, torch.full_like(r, float("inf"))).amin(1, keepdim=True)
    hi = torch.where(finite, r, torch.full_like(r, float("-inf"))).amax(1, keepdim=True)
    adv = torch.where(finite & (hi > lo), adv, torch.zeros_like(adv))
    return adv.clamp(-rule.adv_clip, rule.adv_clip).flatten().float(), bad


def group_std(rewards: Tensor, group_size: int) -> float:
    """Mean over groups of the population std of the finite rewards (metric reward_std_in_group)."""
    r = rewards.detach().double().reshape(-1, group_size)
    stds = [g[torch.isfinite(g)].std(unbiased=False) for g in r if torch.isfinite(g).sum() > 0]
    return float(torch.stack(stds).mean()) if stds else float("nan")
