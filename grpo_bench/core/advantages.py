"""Group-normalised advantages (docs/design.md §3).

    A_j = (r_j - mean_group(r)) / (std(r) + 1e-6),  clipped to ±adv_clip,

per prompt group of G rollouts (rows p*G .. p*G+G-1). The std is the run's ``adv_norm``
(``ADV_NORMS``): the group's population std ('group', SAGE-GRPO), its unbiased std ('group_unbiased',
DanceGRPO's torch.std) or the population std of the whole batch ('global', FlowGRPO's global_std).
A group whose rewards are all equal gets exactly zero advantages (not 1-ulp noise divided by 1e-6).
A non-finite reward is a UserError unless ``on_bad_reward == 'zero'``: then that sample gets A = 0
and the group's statistics use its finite rewards only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grpo_bench.errors import UserError

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
"""Allowed ``adv_norm`` values (RunConfig)."""


def group_advantages(
    rewards: Tensor, group_size: int, clip: float = 5.0, on_bad_reward: str = "error", norm: str = "group"
) -> tuple[Tensor, int]:
    """(A: Tensor[B] float32, number of non-finite rewards) for rewards: Tensor[B], B = P*G."""
    r = rewards.detach().double().reshape(-1, group_size)  # [P, G], float64: exact zeros below
    finite = torch.isfinite(r)
    bad = int((~finite).sum())
    if bad and on_bad_reward != "zero":
        raise UserError(
            f"the reward returned {bad} non-finite value(s) (NaN/inf); fix the reward or set on_bad_reward=zero"
        )
    n = finite.sum(1, keepdim=True).clamp(min=1)  # [P, 1]
    r0 = torch.where(finite, r, torch.zeros_like(r))
    mean = r0.sum(1, keepdim=True) / n
    if norm == "global":
        std = _batch_std(r, finite)
    else:
        std = _group_std(r - mean, n, finite, unbiased=norm == "group_unbiased")
    adv = (r0 - mean) / (std + STD_EPS)
    # Equal rewards (or fewer than two finite ones) carry no signal: exactly zero.
    lo = torch.where(finite, r, torch.full_like(r, float("inf"))).amin(1, keepdim=True)
    hi = torch.where(finite, r, torch.full_like(r, float("-inf"))).amax(1, keepdim=True)
    adv = torch.where(finite & (hi > lo), adv, torch.zeros_like(adv))
    return adv.clamp(-clip, clip).flatten().float(), bad


def group_std(rewards: Tensor, group_size: int) -> float:
    """Mean over groups of the population std of the finite rewards (metric reward_std_in_group)."""
    r = rewards.detach().double().reshape(-1, group_size)
    stds = [g[torch.isfinite(g)].std(unbiased=False) for g in r if torch.isfinite(g).sum() > 0]
    return float(torch.stack(stds).mean()) if stds else float("nan")
