"""The generator-model protocol shared by the world model and the diffusers adapters.

The harness's kernels drive sampling; a model only maps (x, sigma, cond) to a velocity
v ≈ E[z - x0 | x] for x_sigma = (1-sigma) x0 + sigma z (docs/design.md §2).

``VideoModel`` is what the trainer calls; ``BaseVideoModel`` gives every member that has an obvious
answer for a small pixel-space model a default (cheap prompts, latents that are the video, the
trainable module's tensors as the exported policy), so callers never probe a model for a method.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Architecture:
    """The networks a built generator is made of, and what its text conditioning costs: what sizes the
    model without running it (``grpo-bench plan``, plan/model_specs.py)."""

    denoiser: nn.Module
    """The network that predicts the velocity (a diffusers transformer; the world's UNet)."""
    vae: nn.Module | None = None
    """The latent autoencoder; None when the latents are the pixels."""
    text_encoders: tuple[nn.Module, ...] = ()
    text_tokens: int = 0
    """Rows of one prompt's text conditioning the denoiser attends to."""
    joint_text: bool = False
    """Text rows join the video tokens in one self-attention sequence (rather than cross-attention)."""
    token_patch: tuple[int, int, int] | None = None
    """(t, h, w) latent positions per transformer token when the config's ``patch_size`` does not say it
    (FLUX packs 2 x 2 latent pixels before a patch-1 transformer); None: read from the config."""
    forward_flops: float = 0.0
    """FLOPs of one sample's denoiser forward when counted (the image models); 0: the plan's estimate."""


@runtime_checkable
class VideoModel(Protocol):
    """What every generator model offers. ``cond`` is whatever ``encode_prompts`` returns; it is
    batched along dim 0 and indexable/concatenable with ``cat_cond``."""

    latent_shape: tuple[int, int, int, int]
    """(C, F, H, W) of one latent sample."""

    video_shape: tuple[int, int, int, int]
    """(3, F, H, W) of one decoded video (what a reward scores; checked against the reward's before sampling)."""

    bf16_by_default: bool
    """``mixed_precision: auto`` computes in bf16 where the hardware has bf16 units (train/precision.py)."""

    gif_preview: bool
    """The final eval videos are also written as a GIF (tiny videos a browser shows at once; MP4 always)."""

    modality: str
    """'video', or 'image' for a still-image generator (one-frame clips; rewards declare what they score)."""

    supports_sequence_parallel: bool
    """It can split one video's tokens over a group of processes (``enable_sequence_parallel``): the diffusers
    video transformers (models/sequence_parallel.py); the trainer refuses ``sequence_parallel > 1`` otherwise."""

    sequence_parallel_group: Any
    """The process group one video's tokens are split over once enabled (None: none); each process then holds a
    partial gradient of the same rows, which the diagnostics sum over it."""

    def enable_sequence_parallel(self, sp: int, device: torch.device) -> None:
        """Split every forward over groups of ``sp`` processes (a collective: every rank calls it)."""

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

    def cache_prompts(self, prompts: list[str]) -> None:
        """Encode every prompt the run will use now (before ``release_text_encoders``)."""

    def release_text_encoders(self, free: bool = False) -> int:
        """Take the text encoders off the accelerator once the prompts are cached; the parameters taken off."""

    def to(self, device: str | torch.device) -> VideoModel:
        """Every component the run computes with on ``device``; returns the model."""

    def save_policy(self, folder: Path, card: dict[str, Any], gathered: dict[int, Tensor] | None = None) -> dict:
        """Write the trained policy into ``folder``; returns what the policy card says about the files.
        ``gathered``: the full trainable tensors of a sharded run, keyed by ``id`` of the parameter."""

    def architecture(self) -> Architecture:
        """The networks the model is made of (for sizing it: ``grpo-bench plan``)."""


class BaseVideoModel(ABC):
    """Defaults of the protocol for a model whose latents are its video and whose prompts are cheap to
    encode; a subclass implements ``latent_shape`` and the five methods above ``cache_prompts``."""

    latent_shape: tuple[int, int, int, int]
    bf16_by_default = False
    gif_preview = False
    modality = "video"
    supports_sequence_parallel = False
    sequence_parallel_group: Any = None

    @property
    def video_shape(self) -> tuple[int, int, int, int]:
        return tuple(self.latent_shape)  # latents are pixels: decode does not change the shape

    @abstractmethod
    def trainable_module(self) -> nn.Module:
        """The module RL trains (the defaults below place and save it): every model names its own."""

    def cache_prompts(self, prompts: list[str]) -> None:
        """Nothing to cache: encoding a prompt is cheap."""
        return None  # a default, not an abstract method: most models have nothing to cache

    def release_text_encoders(self, free: bool = False) -> int:
        return 0  # no text encoder to take off

    def to(self, device: str | torch.device) -> BaseVideoModel:
        self.trainable_module().to(device)
        return self

    def save_policy(self, folder: Path, card: dict[str, Any], gathered: dict[int, Tensor] | None = None) -> dict:
        return save_module(self.trainable_module(), folder, card, gathered)

    def architecture(self) -> Architecture:
        """The trainable module is the whole denoiser; no VAE (latents are pixels), no text encoder."""
        return Architecture(denoiser=self.trainable_module())

    def enable_sequence_parallel(self, sp: int, device: torch.device) -> None:
        """sp = 1 changes nothing; a model without a sequence-parallel path refuses more (the trainer reads
        ``supports_sequence_parallel`` first and says so in one line)."""
        if sp > 1:
            raise NotImplementedError(f"{type(self).__name__} has no sequence-parallel path")


def save_module(module: nn.Module, folder: Path, card: dict[str, Any],
                gathered: dict[int, Tensor] | None = None) -> dict:
    """A module's tensors as one safetensors file, the policy format any torch code reads: the whole state
    dict, or (a sharded run) the gathered trainable tensors by their names in the module."""
    from safetensors.torch import save_file

    if gathered is not None:
        state = {n: gathered[id(p)].contiguous() for n, p in module.named_parameters() if id(p) in gathered}
        save_file(state, str(Path(folder) / "trainable.safetensors"))
        return {"format": "torch-safetensors", "weights": "trainable.safetensors", "base_model": card["model"]}
    state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(Path(folder) / "module.safetensors"))
    return {"format": "torch-safetensors", "weights": "module.safetensors", "base_model": card["model"]}
