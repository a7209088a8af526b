"""What the plan needs of a generator (``ModelSpec``), and how it is read off built modules.

A spec is the architecture alone: parameter counts of the transformer, text encoders and VAE, the
width and depth of the block stack, the latent and decoded video shapes and the sequence length one
video gives. ``plan/model_specs.py`` decides which modules a config's model is read from (real
checkpoints built on ``meta``, registered presets built at random); this module only reads modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class ModelSpec:
    """What the plan needs of a generator."""

    name: str
    transformer_params: int
    text_encoder_params: int
    vae_params: int
    hidden: int
    layers: int
    latent: tuple[int, int, int, int]  # (C, F, H, W) of one latent video
    patch: tuple[int, int, int]
    text_tokens: int
    joint_text: bool
    lora_params: int = 0
    block_params: int = 0
    video: tuple[int, int, int] = (1, 1, 1)  # decoded (F, H, W)
    vae_flops_per_pixel: float = 0.0  # decoder FLOPs per decoded (frame x pixel)
    vae_channels: int = 0  # channels of the decoder's highest-resolution stage
    vae_tile: tuple[int, int] | None = None  # decoded (H, W) of one spatial tile, when the VAE tiles
    forward_flops: float = 0.0  # one sample's denoiser forward, counted (image models); 0: estimated

    @property
    def video_tokens(self) -> int:
        _, f, h, w = self.latent
        return max(1, f // self.patch[0]) * max(1, h // self.patch[1]) * max(1, w // self.patch[2])

    @property
    def tokens(self) -> int:
        """Self-attention sequence length of one video."""
        return self.video_tokens + (self.text_tokens if self.joint_text else 0)


def parameter_count(module: torch.nn.Module | None) -> int:
    """Parameters of a module (0 for an absent one)."""
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def lora_and_block(transformer: torch.nn.Module, rank: int, targets: list[str]) -> tuple[int, int]:
    """(LoRA parameters at ``rank`` on the ``targets`` linears, parameters of the largest block). The
    blocks are the module classes the model itself declares unsplittable (diffusers'
    ``_no_split_modules``), the unit FSDP2 gathers one at a time."""
    lora = 0
    if rank > 0:
        for name, mod in transformer.named_modules():
            if isinstance(mod, torch.nn.Linear) and any(name == t or name.endswith("." + t) for t in targets):
                lora += rank * (mod.in_features + mod.out_features)
    units = tuple(getattr(transformer, "_no_split_modules", None) or ())
    blocks = [m for m in transformer.modules() if type(m).__name__ in units]
    block = max((parameter_count(b) for b in blocks), default=0)
    return lora, block


def patch_size(conf: Any) -> tuple[int, int, int]:
    """(t, h, w) patch of a diffusers transformer config: Wan's is a triple, HunyuanVideo's a spatial size
    beside ``patch_size_t``."""
    patch = (conf.patch_size if isinstance(conf.patch_size, (list, tuple))
             else (conf.get("patch_size_t", 1), conf.patch_size, conf.patch_size))
    return tuple(patch)


def latent_geometry(frames: int, height: int, width: int, t: int, s: int, patch: int) -> tuple[int, int, int]:
    """Latent (F, H, W) as the adapters round them (models/diffusers_video.py ``_latent_shape``)."""
    frames = max(1, round((frames - 1) / t)) * t + 1
    h, w = (max(1, round(v / (s * patch))) * s * patch for v in (height, width))
    return (frames - 1) // t + 1, h // s, w // s


def transformer_spec(transformer: torch.nn.Module, latent: tuple[int, int, int, int], text_tokens: int,
                     joint_text: bool) -> ModelSpec:
    """The spec of a built transformer (a layer stack in gpu_check, a measured model in tests)."""
    conf = transformer.config
    _, block = lora_and_block(transformer, 0, [])
    return ModelSpec(type(transformer).__name__, parameter_count(transformer), 0, 0,
                     conf.num_attention_heads * conf.attention_head_dim, conf.num_layers, latent, patch_size(conf),
                     text_tokens, joint_text, 0, block)


def vae_decode_profile(vae: torch.nn.Module, channels: int) -> tuple[float, int, tuple[int, int] | None]:
    """(decoder FLOPs per decoded frame x pixel, highest-resolution channels, decoded tile (H, W)) of a
    VAE: the FLOPs counted by torch's FlopCounterMode on one small latent (untiled; the decoder is
    convolutional, so they scale with the decoded volume), on the module's own device (``meta`` for the
    named checkpoints)."""
    from torch.utils.flop_counter import FlopCounterMode

    device = next(vae.parameters()).device
    dtype = next(vae.parameters()).dtype
    tiling = getattr(vae, "use_tiling", False)
    vae.use_tiling = False
    out = None
    try:
        for shape in ((1, channels, 2, 4, 4), (1, channels, 4, 4)):  # a video VAE, else an image VAE
            try:
                with FlopCounterMode(display=False) as counter, torch.no_grad():
                    out = vae._decode(torch.zeros(shape, device=device, dtype=dtype))
                    out = out[0] if isinstance(out, tuple) else getattr(out, "sample", out)
                break
            except Exception:  # not this VAE's layout
                out = None
    finally:
        vae.use_tiling = tiling
    if out is None:  # a VAE this profile cannot drive: no decode term
        return 0.0, 0, None
    per_pixel = counter.get_total_flops() / math.prod(out.shape[2:])
    conf = vae.config
    top = (conf.get("block_out_channels") or [conf.get("decoder_base_dim") or conf.get("base_dim") or 0])[0]
    th, tw = (getattr(vae, "tile_sample_min_height", None), getattr(vae, "tile_sample_min_width", None))
    return float(per_pixel), int(top), (int(th), int(tw)) if th and tw else None
