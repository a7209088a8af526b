"""What one reward forward costs, declared by the reward's factory (``compute``, read by ``factory_declaration``)
so that ``grpo-bench plan`` counts it without a table keyed by reward name.

A declaration answers ``forward(frames) -> Forward``: the FLOPs of scoring one video of ``frames`` frames (a still:
1), the activation units of one reward call (tokens x width of the towers alive in one layer, summed over the
call's rows; the plan multiplies them by its no-grad bytes per unit), and the seconds a CPU-side engine takes per
video (OCR's ONNX models run on the host, not on the GPU). Kinds:

    ImageTowers    transformer towers run once per scored frame (CLIPScore, PickScore, HPSv2, ImageReward): sizes
                   from each model's official config, FLOPs in closed form (``Tower``)
    VisionLanguageVideo  a vision tower over 2-frame patches and a language model over the merged tokens
                   (VideoAlign's Qwen2-VL), parameter-count based
    CountedForward a network shipped with the package (the embedded worlds' judges): FLOPs counted by torch's
                   FlopCounterMode on its own forward at its declared input shape
    HostSeconds    an engine that runs on the CPU (PP-OCRv4 through ONNX Runtime): measured seconds per image
    NO_NETWORK     nothing to count (JPEG size, the exact oracles)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Forward:
    """One video's reward forward (the module docstring)."""

    flops: float
    activation_units: float
    host_seconds: float = 0.0


@dataclass(frozen=True)
class Tower:
    """A pre-norm transformer encoder as its config sizes it: ``layers`` blocks of width ``width`` (attention
    q, k, v, o: 4 w^2; MLP: 2 x mlp_ratio x w^2) over ``tokens`` tokens, after a patch embedding of
    ``patch_inputs`` inputs per patch for ``patches`` patches (0: a text tower's embedding lookup, no FLOPs).
    ``cross_width`` / ``cross_tokens``: a cross-attention in every block (BERT's, to the image tokens):
    q and o on the tower's tokens, k and v from ``cross_tokens`` tokens of width ``cross_width``."""

    width: int
    layers: int
    tokens: int
    mlp_ratio: float = 4.0
    patches: int = 0
    patch_inputs: int = 0
    cross_width: int = 0
    cross_tokens: int = 0

    def layer_params(self) -> float:
        """Matrix parameters of one block (biases and norms are O(w) and left out)."""
        cross = 2 * self.width**2 + 2 * self.width * self.cross_width if self.cross_width else 0
        return (4 + 2 * self.mlp_ratio) * self.width**2 + cross

    def flops(self) -> float:
        """Forward FLOPs of one input: 2 per multiply-add of every matrix product, attention's QK^T and AV
        (4 x tokens^2 x width per block; with cross-attention 4 x tokens x cross_tokens x width more)."""
        w, t = self.width, self.tokens
        per_layer = 2 * ((4 + 2 * self.mlp_ratio) * w**2) * t + 4 * t * t * w
        if self.cross_width:
            per_layer += 2 * 2 * w * w * t + 2 * 2 * w * self.cross_width * self.cross_tokens
            per_layer += 4 * t * self.cross_tokens * w
        return self.layers * per_layer + 2 * self.patch_inputs * w * self.patches

    def activation_units(self) -> float:
        return self.tokens * self.width


@dataclass(frozen=True)
class ImageTowers:
    """Towers run once per scored image: min(``max_frames``, F) frames of a video (a still: its one frame),
    ``call_images`` images per reward call; ``head_flops`` per image for a head after the towers."""

    towers: tuple[Tower, ...]
    max_frames: int
    call_images: int
    head_flops: float = 0.0

    def forward(self, frames: int) -> Forward:
        images = min(self.max_frames, max(1, frames))
        per_image = sum(t.flops() for t in self.towers) + self.head_flops
        return Forward(flops=images * per_image,
                       activation_units=self.call_images * sum(t.activation_units() for t in self.towers))


@dataclass(frozen=True)
class VisionLanguageVideo:
    """Qwen2-VL scoring a video: round_2(F / source_fps x 2) frames (at least 4) of ``pixels`` pixels as
    ``patch`` x ``patch`` x 2 patches through the vision tower, merged 2 x 2 into language tokens beside
    ``prompt_tokens`` prompt tokens; 2 x parameters x tokens per tower; ``call_videos`` videos per call."""

    vision_params: float
    vision_hidden: int
    lm_params: float
    lm_hidden: int
    pixels: int
    source_fps: float
    patch: int = 14
    prompt_tokens: int = 128
    call_videos: int = 2

    def forward(self, frames: int) -> Forward:
        n = max(4, 2 * round(frames / self.source_fps))
        patches = n // 2 * self.pixels / self.patch**2
        tokens = patches / 4 + self.prompt_tokens
        return Forward(flops=2 * (self.vision_params * patches + self.lm_params * tokens),
                       activation_units=self.call_videos * (patches * self.vision_hidden + tokens * self.lm_hidden))


@dataclass(frozen=True)
class CountedForward:
    """A network shipped with the package: ``example() -> (callable, args)`` builds it and one input of the
    shape it scores; FLOPs counted once by FlopCounterMode per call of ``per_images`` images (a video of the
    embedded world, or one still)."""

    example: Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]
    per_images: int = 1

    def forward(self, frames: int) -> Forward:
        return Forward(flops=_counted_flops(self.example) / self.per_images, activation_units=0.0)


@functools.cache
def _counted_flops(example: Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    fn, args = example()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(*args)
    return float(counter.get_total_flops())


@dataclass(frozen=True)
class HostSeconds:
    """An engine on the CPU that scores stills: ``per_image`` seconds of one thread per still (measured; not
    scaled by size), no FLOPs on the GPU."""

    per_image: float

    def forward(self, frames: int) -> Forward:
        return Forward(flops=0.0, activation_units=0.0, host_seconds=self.per_image)


@dataclass(frozen=True)
class NoNetwork:
    """A reward that runs no network (a closed-form score): nothing for the plan to count."""

    why: str

    def forward(self, frames: int) -> Forward:
        return Forward(0.0, 0.0)


def clip_towers(vision: dict[str, int], text: dict[str, int], max_frames: int, call_images: int) -> ImageTowers:
    """An OpenCLIP-config CLIP (``vision_cfg``: image_size, layers, width, patch_size; ``text_cfg``:
    context_length, width, layers; mlp_ratio 4 in both, the OpenCLIP default): one class token beside the
    patches."""
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    return ImageTowers(
        towers=(Tower(width=vision["width"], layers=vision["layers"], tokens=patches + 1, patches=patches,
                      patch_inputs=3 * vision["patch_size"] ** 2),
                Tower(width=text["width"], layers=text["layers"], tokens=text["context_length"])),
        max_frames=max_frames, call_images=call_images)
