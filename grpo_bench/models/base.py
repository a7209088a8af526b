"""The generator-model protocol shared by the world model and the diffusers adapters.

The harness's kernels drive sampling; a model only maps (x, sigma, cond) to a velocity
v ≈ E[z - x0 | x] for x_sigma = (1-sigma) x0 + sigma z (docs/design.md §2).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn


@runtime_checkable
class VideoModel(Protocol):
    """What every generator model offers. ``cond`` is whatever ``encode_prompts`` returns; it is
    batched along dim 0 and indexable/concatenable with ``cat_cond``."""

    latent_shape: tuple[int, int, int, int]
    """(C, F, H, W) of one latent sample."""

    bf16_by_default: bool
    """Optional (default False): ``mixed_precision: auto`` computes in bf16 where the hardware has bf16
    units (train/precision.py)."""

    def encode_prompts(self, prompts: list[str]) -> Any:
        """Conditioning for a list of prompts (cached where encoding is expensive)."""

    def null_cond(self, n: int) -> Any:
        """Unconditional conditioning for n samples (classifier-free guidance)."""

    def velocity(self, x: Tensor, sigma: Tensor, cond: Any) -> Tensor:
        """v for latents x: Tensor[B, C, F, H, W] at noise levels sigma: Tensor[B]."""

    def decode(self, x: Tensor) -> Tensor:
        """Videos Tensor[B, 3, F, H, W] in [-1, 1] from final latents."""

    def trainable_module(self) -> nn.Module:
        """The nn.Module whose parameters RL updates (the whole net, or its LoRA adapters)."""
