"""The image world's exact checker as a reward and as its prompt set's ground truth (``image_world_oracle``), and
the prompt set itself (``prompts: image_world``: 564 train / 8 held-out eval prompts).

As a training reward it is the oracle track of the image world (the judge track, a learned hackable judge, is not
built yet: docs/image_world.md); under ``eval_oracle`` evaluation reports its columns beside the training reward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grpo_bench.image_world.checker import check
from grpo_bench.image_world.grammar import prompts
from grpo_bench.image_world.model import ORACLE, PROMPT_SET
from grpo_bench.registry import PROMPT_SETS
from grpo_bench.rewards import register
from grpo_bench.rewards.base import Reward
from grpo_bench.rewards.compute import NoNetwork


@register(ORACLE, ground_truth_for=PROMPT_SET, compute=NoNetwork("the exact checker's closed-form checks"))
class ImageWorldOracleReward(Reward):
    """{"vq", "mq", "ta"} of the checker (grpo_bench/image_world/checker.py) under no_grad."""

    dimensions = ("vq", "mq", "ta")
    modality = "image"
    has_ground_truth = True
    embedded = True
    label = "oracle"
    example_prompts = ("a red circle", "three blue squares")  # prompts of the form it scores (grammar.py)
    media_size = 32  # the checker reads 32x32 images

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = device  # the checker runs on the CPU; scores go back to the images' device

    @torch.no_grad()
    def ground_truth(self, images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        """Every checker column (vq, mq, ta, correct, manifold and one per constraint kind)."""
        return check(images, prompts)

    @torch.no_grad()
    def __call__(self, images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        scores = check(images.detach().float().cpu(), prompts)
        return {k: scores[k].to(images.device) for k in self.dimensions}


@PROMPT_SETS.register(PROMPT_SET)
def image_world_prompts() -> tuple[list[str], list[str]]:
    """(train, eval) prompts of the image world."""
    return prompts("train"), prompts("eval")
