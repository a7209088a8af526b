"""Shared machinery of the CLIP-family rewards (CLIPScore, PickScore): frame sampling, CLIP image
preprocessing in torch, batched embedding, loading from local files only.

Preprocessing follows ``CLIPImageProcessor`` (the numbers are read from the checkpoint's
preprocessor config): resize the shorter side to ``size`` (bicubic, antialiased), centre-crop
``crop`` x ``crop``, scale to [0, 1], normalise with the processor's mean/std. It runs on tensors,
batched, on the reward's device (no PIL round trip); it matches the PIL path to about 1/255 per
pixel (resampling differences), well under the score noise of these models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.hub_offline import offline_hub
from grpo_bench.rewards.base import Reward, refuse_mismatched_keys

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def sample_frames(videos: Tensor, n: int) -> Tensor:
    """n frames per video, evenly spaced from the first to the last (rounded indices):
    videos Tensor[B, 3, F, H, W] -> Tensor[B, n', 3, H, W] with n' = min(n, F)."""
    frames = videos.shape[2]
    idx = torch.linspace(0, frames - 1, min(n, frames)).round().long()
    return videos[:, :, idx].transpose(1, 2)


def clip_preprocess(images: Tensor, size: int, crop: int, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """images Tensor[N, 3, H, W] in [-1, 1] -> CLIP pixel values Tensor[N, 3, crop, crop]."""
    x = (images.float().clamp(-1, 1) + 1) / 2
    h, w = x.shape[-2:]
    scale = size / min(h, w)
    new = (max(crop, round(h * scale)), max(crop, round(w * scale)))
    x = F.interpolate(x, size=new, mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
    top, left = (new[0] - crop) // 2, (new[1] - crop) // 2
    x = x[..., top : top + crop, left : left + crop]
    m = torch.tensor(mean, device=x.device).view(1, 3, 1, 1)
    s = torch.tensor(std, device=x.device).view(1, 3, 1, 1)
    return (x - m) / s


def features(output: Any) -> Tensor:
    """The embeddings of a ``get_*_features`` call: the tensor itself, or (transformers 5 may return a model
    output) its ``pooler_output``."""
    return output if isinstance(output, Tensor) else output.pooler_output


class ClipLikeReward(Reward):
    """Cosine similarity of CLIP image and text embeddings, averaged over sampled frames; the
    subclass's ``scale`` maps the cosine to its reward's published scaling."""

    key: str = "clip"
    dimensions: tuple[str, ...] = ("clip",)
    settings: dict[str, dict[str, float]] = {"A": {"clip": 1.0}, "B": {"clip": 1.0}}
    """A single score: both settings weight it 1 (the VQ/MQ/TA settings do not apply)."""
    modality = "any"  # every sampled frame: a still is a one-frame clip

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        size: int = 224,
        crop: int = 224,
        mean: tuple[float, ...] = OPENAI_CLIP_MEAN,
        std: tuple[float, ...] = OPENAI_CLIP_STD,
        frames: int = 8,
        batch_size: int = 32,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.device = torch.device(device)
        self.model = model.requires_grad_(False).eval().to(self.device, dtype)
        self.tokenizer = tokenizer
        self.size, self.crop, self.mean, self.std = int(size), int(crop), tuple(mean), tuple(std)
        self.frames, self.batch_size, self.dtype = int(frames), int(batch_size), dtype

    def scale(self, cosine: Tensor) -> Tensor:
        return cosine

    @torch.no_grad()
    def cosine(self, videos: Tensor, prompts: list[str]) -> Tensor:
        """Per-video mean over sampled frames of cos(image, text): Tensor[B] (float32)."""
        if videos.shape[0] != len(prompts):
            raise ValueError(f"{videos.shape[0]} videos but {len(prompts)} prompts")
        frames = sample_frames(videos, self.frames)  # [B, n, 3, H, W]
        b, n = frames.shape[:2]
        text = self.tokenizer(prompts, padding=True, truncation=True, max_length=77, return_tensors="pt").to(
            self.device
        )
        t = F.normalize(features(self.model.get_text_features(**text)).float(), dim=-1)  # [B, D]
        flat = frames.reshape(b * n, *frames.shape[2:])
        embs = []
        for chunk in flat.split(self.batch_size):
            pixels = clip_preprocess(chunk.to(self.device), self.size, self.crop, self.mean, self.std)
            e = self.model.get_image_features(pixel_values=pixels.to(self.dtype))
            embs.append(F.normalize(features(e).float(), dim=-1))
        img = torch.cat(embs).view(b, n, -1)  # [B, n, D]
        return (img * t[:, None]).sum(-1).mean(1)

    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        return {self.key: self.scale(self.cosine(videos, prompts)).cpu()}


def load_clip_parts(model_source: str, processor_source: str | None, what: str) -> tuple[nn.Module, Any, dict]:
    """(CLIPModel, tokenizer, preprocessing numbers) from local folders or the local HF cache only."""
    from transformers import AutoTokenizer, CLIPModel
    from transformers.utils import cached_file

    processor_source = processor_source or model_source

    def local(src: str) -> str:
        p = Path(os.path.expanduser(src))
        return str(p) if p.exists() else src

    try:
        with offline_hub():
            model, info = CLIPModel.from_pretrained(local(model_source), local_files_only=True,
                                                    output_loading_info=True)
            tokenizer = AutoTokenizer.from_pretrained(local(processor_source), local_files_only=True)
            cfg_file = cached_file(local(processor_source), "preprocessor_config.json", local_files_only=True)
        pre = json.loads(Path(cfg_file).read_text())
    except (OSError, ValueError) as exc:
        missing = model_source if not Path(os.path.expanduser(model_source)).exists() else processor_source
        raise UserError(
            f"{what}: {missing!r} is not available locally ({str(exc).splitlines()[0][:120]}); grpo-bench never "
            f"downloads weights: run `hf download {missing}` (into the Hugging Face cache, found by name), or "
            f"download it to a folder and pass the folder (rewards.load(..., model=DIR))"
        ) from None
    refuse_mismatched_keys(what, model_source, info["missing_keys"], info["unexpected_keys"])
    size = pre.get("size", 224)
    crop = pre.get("crop_size", 224)
    numbers = {
        "size": size.get("shortest_edge", 224) if isinstance(size, dict) else int(size),
        "crop": crop.get("height", 224) if isinstance(crop, dict) else int(crop),
        "mean": tuple(pre.get("image_mean", OPENAI_CLIP_MEAN)),
        "std": tuple(pre.get("image_std", OPENAI_CLIP_STD)),
    }
    return model, tokenizer, numbers


# The CLIP towers' sizes, as OpenCLIP's configs give them (the plan's reward FLOPs: rewards/compute.py clip_towers).
# OpenCLIP ViT-H-14 (tgxs002/HPSv2@866735e hpsv2/src/open_clip/model_configs/ViT-H-14.json:4-15: image 224, 32 layers
# of width 1280, patch 14; text 77 tokens, width 1024, 24 layers; mlp_ratio 4.0, open_clip/model.py:28 and
# open_clip/transformer.py:194)
VIT_H_14 = {"vision": {"image_size": 224, "layers": 32, "width": 1280, "patch_size": 14},
            "text": {"context_length": 77, "width": 1024, "layers": 24}}
# OpenAI CLIP ViT-L/14 (the same tgxs002/HPSv2@866735e open_clip/model_configs/ViT-L-14.json:4-14: image 224, 24
# layers of width 1024, patch 14; text 77 tokens, width 768, 12 layers)
VIT_L_14 = {"vision": {"image_size": 224, "layers": 24, "width": 1024, "patch_size": 14},
            "text": {"context_length": 77, "width": 768, "layers": 12}}
