"""JPEG (in)compressibility of still images: DDPO's and flow_grpo's weight-free image rewards.

Read from ``yifan123/flow_grpo`` ``flow_grpo/rewards.py`` (``jpeg_incompressibility``,
``jpeg_compressibility``): each image as uint8 RGB is saved as JPEG at quality 95 and its size in kB
(bytes / 1000) is the incompressibility; compressibility is ``-size_kB / 500``. Needs no weights, so
it is the reward the image presets train on in the CPU tests and the commands of docs/real_models.md.
Scores a still image per clip (a one-frame video); a multi-frame video is refused before sampling.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from torch import Tensor

from grpo_bench.rewards import register
from grpo_bench.rewards.base import Reward
from grpo_bench.rewards.compute import NoNetwork

QUALITY = 95
COMPRESSIBILITY_SCALE = 500.0


def jpeg_kilobytes(images: Tensor) -> Tensor:
    """images Tensor[B, 3, H, W] in [-1, 1] -> JPEG size in kB at quality 95: Tensor[B] (float32)."""
    from PIL import Image

    pixels = ((images.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    sizes = []
    for im in pixels.permute(0, 2, 3, 1).cpu().numpy():
        buffer = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(im)).save(buffer, format="JPEG", quality=QUALITY)
        sizes.append(buffer.tell() / 1000)
    return torch.tensor(sizes, dtype=torch.float32)


class JpegIncompressibility(Reward):
    """{"jpeg": Tensor[B]}: the JPEG size in kB of each still (larger = more detail)."""

    key = "jpeg"
    dimensions = ("jpeg",)
    settings = {"A": {"jpeg": 1.0}, "B": {"jpeg": 1.0}}
    modality = "image"

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = device

    def score(self, kilobytes: Tensor) -> Tensor:
        return kilobytes

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        if videos.shape[2] != 1:
            raise ValueError(f"{type(self).__name__} scores still images (one frame), got {videos.shape[2]} frames")
        return {self.key: self.score(jpeg_kilobytes(videos[:, :, 0]))}


class JpegCompressibility(JpegIncompressibility):
    """{"jpeg": Tensor[B]}: ``-size_kB / 500`` (flow_grpo's ``jpeg_compressibility``)."""

    def score(self, kilobytes: Tensor) -> Tensor:
        return -kilobytes / COMPRESSIBILITY_SCALE


@register("jpeg_compressibility", compute=NoNetwork("the JPEG size of each still"))
def jpeg_compressibility(device: str | None = None, **kw: object) -> JpegCompressibility:
    """flow_grpo's ``jpeg_compressibility`` (no weights)."""
    return JpegCompressibility(device or "cpu")


@register("jpeg_incompressibility", compute=NoNetwork("the JPEG size of each still"))
def jpeg_incompressibility(device: str | None = None, **kw: object) -> JpegIncompressibility:
    """flow_grpo's ``jpeg_incompressibility`` (no weights)."""
    return JpegIncompressibility(device or "cpu")

