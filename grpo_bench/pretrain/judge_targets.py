"""What the world judge learns and how it is measured (``pretrain/judge.py``): the oracle's scores as
regression targets, the regression and ranking losses, and Spearman against the oracle."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from grpo_bench.rewards.world_judge import AUXILIARY, DIMENSIONS, PARTS, WorldJudge
from grpo_bench.world.generator import direction_vectors
from grpo_bench.world.oracle import fit, oracle

AUX_WEIGHT = 0.5
SCORE_WEIGHTS = torch.tensor([1.0, 2.0, 2.0])  # (vq, mq, ta): MQ's and TA's fine orderings are the hardest to learn
LOG_FLOOR = -7.0  # log-score targets are floored here (a score of ~0.001: pure noise)
LOG_TARGETS = ("vq", "mq", "bg", "edge", "palette", "velocity", "size", "constancy", "flicker")


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
    loss = (err * SCORE_WEIGHTS).sum(1).mean() / SCORE_WEIGHTS.sum() + AUX_WEIGHT * (
        (pred[:, n : n + a] - y[:, n : n + a]) ** 2
    ).mean()
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


