"""PickScore (yuvalkirstain/PickScore_v1) with its CLIP-H processor
(laion/CLIP-ViT-H-14-laion2B-s32B-b79K), averaged over sampled frames.

Scaling (papers differ, so it is spelled out): the reward ``pickscore`` is the reference inference's
score, the learned logit scale times the cosine similarity, averaged over frames:
    pickscore = exp(logit_scale) * mean over n frames of cos(E_img(frame), E_txt(prompt))
with exp(logit_scale) read from the checkpoint (about 100 for PickScore_v1; typical values 18-24),
n = 8 frames evenly spaced, the CLIP-H processor's preprocessing (shorter side 224 bicubic, centre
crop 224, CLIP mean/std). It is NOT divided by 26 (Flow-GRPO's normalisation) nor soft-maxed across
images (the preference probability of the PickScore paper).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.rewards import register
from grpo_bench.rewards.base import FOLDER, RewardModelWeights
from grpo_bench.rewards.clip_common import VIT_H_14, ClipLikeReward, load_clip_parts
from grpo_bench.rewards.compute import clip_towers

DEFAULT_MODEL = "yuvalkirstain/PickScore_v1"
DEFAULT_PROCESSOR = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"


class PickScore(ClipLikeReward):
    """{"pickscore": Tensor[B]}: exp(logit_scale) * mean-over-frames cosine (see module docstring)."""

    key = "pickscore"
    dimensions = ("pickscore",)
    settings = {"A": {"pickscore": 1.0}, "B": {"pickscore": 1.0}}

    def scale(self, cosine: Tensor) -> Tensor:
        return self.model.logit_scale.exp().float().to(cosine.device) * cosine


@register(
    "pickscore",
    path_options={"model": FOLDER, "processor": FOLDER},  # reward_path, reward_base_path
    # CLIP ViT-H/14: 986M parameters, held in float32 (the dtype the factory passes)
    model_weights=RewardModelWeights(9.86e8),
    # CLIP-ViT-H-14-laion2B is OpenCLIP's ViT-H-14; 8 frames (``frames``), 32 images per call (``batch_size``)
    compute=clip_towers(VIT_H_14["vision"], VIT_H_14["text"], max_frames=8, call_images=32),
)
def pickscore(
    model: str = DEFAULT_MODEL, processor: str = DEFAULT_PROCESSOR, device: str | None = None, frames: int = 8,
    batch_size: int = 32, **kw: Any,
) -> PickScore:
    """PickScore from local folders or the local Hugging Face cache (never downloads)."""
    from grpo_bench.rewards.videoalign import auto_device

    device = auto_device(device)
    net, tokenizer, numbers = load_clip_parts(model, processor, "PickScore")
    return PickScore(net, tokenizer, frames=frames, batch_size=batch_size, device=device, dtype=torch.float32,
                     **numbers, **kw)

