"""The exact oracle as a reward: what RL would see with a perfect, unhackable reward model.

Scores are the oracle's VQ/MQ/TA in [0, 1] (not z-scores); used by tests and as a diagnostic upper bound.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grpo_bench.rewards import register
from grpo_bench.rewards.base import Reward
from grpo_bench.rewards.compute import NoNetwork
from grpo_bench.world.oracle import oracle


@register("world_oracle", ground_truth_for="world", compute=NoNetwork("the exact oracle's closed-form checks"))
class WorldOracleReward(Reward):
    """{"vq", "mq", "ta"} from ``grpo_bench.world.oracle`` under no_grad."""

    dimensions = ("vq", "mq", "ta")
    modality = "video"  # motion quality needs frames
    has_ground_truth = True
    embedded = True  # ships with the package: no transformers needed
    label = "oracle"  # how a run's summary names its training reward

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = device  # the oracle runs on the CPU; scores come back on the videos' device

    @torch.no_grad()
    def ground_truth(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        """Every oracle column (vq, mq, ta, correct, manifold and the sub-scores) of the videos as given:
        what evaluation reports beside the training reward under ``eval_oracle``."""
        return oracle(videos, prompts)

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        scores = oracle(videos.detach().float().cpu(), prompts)
        return {k: scores[k].to(videos.device) for k in self.dimensions}
