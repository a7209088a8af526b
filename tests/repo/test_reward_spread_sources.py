"""benchmarks/reward_spread_sources.py: the share of a group's reward variance fixed by the initial noise (one-way
ANOVA intraclass correlation) and the share of groups whose scores differ."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import reward_spread_sources as rss  # noqa: E402


def test_noise_share_is_one_when_the_noise_fixes_the_score_and_zero_when_it_does_not():
    between = torch.tensor([[0.0] * 4, [1.0] * 4, [0.5] * 4])
    assert rss.noise_share(between) == 1.0
    within = torch.tensor([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]])  # equal row means
    assert rss.noise_share(within) == 0.0
    assert math.isnan(rss.noise_share(torch.ones(3, 4)))


def test_noise_share_recovers_a_known_variance_split():
    # random effects: noise effect sd 1, path sd sqrt(3): the intraclass correlation is 1 / (1 + 3) = 0.25
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4000, 1, generator=g) + 3 ** 0.5 * torch.randn(4000, 8, generator=g)
    assert abs(rss.noise_share(scores) - 0.25) < 0.01


def test_mixed_groups_counts_groups_across_noises():
    # column j is a group: path j of every noise; columns 0 and 2 are all equal, 1 and 3 are not
    scores = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    assert rss.mixed_groups(scores) == 0.5
