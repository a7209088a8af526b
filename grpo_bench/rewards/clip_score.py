"""CLIPScore with openai/clip-vit-large-patch14, averaged over sampled frames.

Scaling (papers differ, so it is spelled out): the reward ``clip`` is the raw cosine similarity
    clip = mean over n sampled frames of cos(E_img(frame), E_txt(prompt))        in [-1, 1]
with n = 8 frames evenly spaced from first to last (all frames if fewer), CLIP preprocessing as
``CLIPImageProcessor`` (shorter side 224 bicubic, centre crop 224, CLIP mean/std), text truncated to
77 tokens. Related conventions: Hessel et al. (2021) CLIP-S = 2.5 * max(cos, 0); torchmetrics
CLIPScore = 100 * max(cos, 0). Group-normalised advantages are invariant to the positive factor.
"""

from __future__ import annotations

from typing import Any

from grpo_bench.rewards import register
from grpo_bench.rewards.base import FOLDER, RewardModelWeights
from grpo_bench.rewards.clip_common import VIT_L_14, ClipLikeReward, load_clip_parts
from grpo_bench.rewards.compute import clip_towers

DEFAULT_MODEL = "openai/clip-vit-large-patch14"


class ClipScore(ClipLikeReward):
    """{"clip": Tensor[B]}: mean-over-frames cosine similarity (see module docstring)."""

    key = "clip"
    dimensions = ("clip",)


@register(
    "clip_score",
    path_options={"model": FOLDER},  # reward_path (a model folder)
    # CLIP ViT-L/14: 427.6M parameters, held in float32 (ClipLikeReward's dtype)
    model_weights=RewardModelWeights(4.28e8),
    # 8 frames (the factory's ``frames``), 32 images per call (``batch_size``)
    compute=clip_towers(VIT_L_14["vision"], VIT_L_14["text"], max_frames=8, call_images=32),
)
def clip_score(
    model: str = DEFAULT_MODEL, device: str | None = None, frames: int = 8, batch_size: int = 32, **kw: Any
) -> ClipScore:
    """CLIPScore from a local folder or the local Hugging Face cache (never downloads)."""
    from grpo_bench.rewards.videoalign import auto_device

    device = auto_device(device)
    net, tokenizer, numbers = load_clip_parts(model, None, "CLIPScore")
    return ClipScore(net, tokenizer, frames=frames, batch_size=batch_size, device=device, **numbers, **kw)

