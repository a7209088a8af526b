"""A diffusers text-to-image pipeline (SD3 / SD3.5, FLUX.1, Qwen-Image) behind the VideoModel protocol.

A still image is a one-frame clip: latents are ``Tensor[B, C, 1, H, W]`` and ``decode`` returns
``Tensor[B, 3, 1, H', W']``, so the kernels, the rollout, the trainer, the statistics and every reward
that scores frames see the same shapes as for a video. The image velocity nets drop the frame axis
before the transformer (and FLUX / Qwen-Image pack 2 x 2 latent patches into tokens exactly as their
pipelines' ``_pack_latents``) and put it back on the output, so the harness's latents stay the VAE's
latent grid, in the pipeline's normalised latent space.

Everything else is the video adapters' (models/diffusers_video.py): loading from a local folder or
the Hugging Face cache only, text encoded once per prompt with the pipeline's own ``encode_prompt``
and cached, LoRA through peft or full fine-tuning with float32 master weights, the policy export.
A model asked for more than one frame is refused (``frames`` must be 1; config validation refuses it
before any model is built, config/weights.py ``check_modality``).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.models.base import Architecture
from grpo_bench.models.diffusers_video import DiffusersVideoModel
from grpo_bench.models.velocity_net import TextCond, VelocityNet


def pack_latents(x: Tensor) -> Tensor:
    """[B, C, H, W] -> [B, (H/2)(W/2), 4C]: the 2 x 2 patch tokens of FluxPipeline / QwenImagePipeline
    ``_pack_latents`` (channel-major inside a patch)."""
    b, c, h, w = x.shape
    return x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(tokens: Tensor, h: int, w: int) -> Tensor:
    """The inverse of ``pack_latents``: [B, (h/2)(w/2), 4C] -> [B, C, h, w]."""
    b, _, d = tokens.shape
    return tokens.view(b, h // 2, w // 2, d // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, d // 4, h, w)


class ImageVelocityNet(VelocityNet):
    """A velocity net for one-frame latents: the subclass sees ``x[:, :, 0]`` ([B, C, H, W]) and returns
    the transformer's output in that layout; the frame axis is put back here."""

    def output(self, out: Tensor, x: Tensor) -> Tensor:
        _, _, _, h, w = x.shape
        if out.dim() == 3:  # packed tokens (FLUX, Qwen-Image)
            out = unpack_latents(out, h, w)
        return out[:, :, None]


class DiffusersImageModel(DiffusersVideoModel):
    """A text-to-image pipeline as one-frame clips. A family subclass declares ``vae_scale`` (the VAE's
    spatial factor, the pipeline's ``vae_scale_factor``), ``latent_channels`` and ``token_patch`` (2 for
    the packed FLUX / Qwen-Image tokens, the transformer's patch for SD3), and implements
    ``encode_batch`` (and ``vae_decode`` where the VAE is not SD3/FLUX's ``AutoencoderKL``)."""

    modality = "image"
    gif_preview = False
    supports_sequence_parallel = False  # no token split of an image transformer (config/run.py refuses it first)

    def _latent_shape(self) -> tuple[int, int, int, int]:
        o = self.options
        if o.frames != 1:
            raise UserError(f"model {self.family} makes still images: frames must be 1, got {o.frames} "
                            "(a still image is a one-frame clip)")
        _, s, channels, patch = self.vae_factors()
        height, width = (max(1, round(v / (s * patch))) * s * patch for v in (o.height, o.width))
        if (height, width) != (o.height, o.width):
            warnings.warn(f"{type(self).__name__}: height x width {o.height}x{o.width} rounded to {height}x{width} "
                          f"(a multiple of {s * patch})", stacklevel=3)
            o.height, o.width = height, width
        return (channels, 1, height // s, width // s)

    def architecture(self) -> Architecture:
        """The video adapters' architecture, with the latent pixels per token (FLUX / Qwen-Image pack 2 x 2) and
        the counted FLOPs of one forward (``denoiser_flops``)."""
        c, _, h, w = self.latent_shape
        arch = super().architecture()
        flops = denoiser_flops(self.net_class, self.net.transformer, (c, h, w), arch.text_tokens)
        return dataclasses.replace(arch, token_patch=(1, self.token_patch(), self.token_patch()), forward_flops=flops)

    def vae_factors(self) -> tuple[int, int, int, int]:
        """(1, VAE spatial factor, latent channels, latent pixels per token side)."""
        return (1, self.vae_scale(), self.latent_channels(), self.token_patch())

    def vae_scale(self) -> int:
        return int(self.pipe.vae_scale_factor)

    def latent_channels(self) -> int:
        return int(self.pipe.vae.config.latent_channels)

    def token_patch(self) -> int:
        return 2  # FLUX and Qwen-Image pack 2 x 2 latent pixels into one token

    def vae_decode(self, x: Tensor) -> Tensor:
        """SD3 / FLUX (``AutoencoderKL``): ``latents / scaling_factor + shift_factor``, then decode;
        [b, C, 1, h, w] -> [b, 3, 1, H, W]."""
        vae = self.pipe.vae
        z = x[:, :, 0].float() / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
        return vae.decode(z, return_dict=False)[0][:, :, None]

    def pipeline_shift(self) -> float:
        """The schedule shift the pipeline samples this resolution at (FLUX and Qwen-Image shift by the
        image's token count: exp(mu) of ``calculate_shift``; SD3 by its scheduler's fixed ``shift``). The
        harness's ``sigma = shift s / (1 + (shift - 1) s)`` equals the scheduler's exponential time
        shift with mu = ln(shift), so ``shift: <this>`` samples on the pipeline's schedule."""
        sched = self.pipe.scheduler.config
        if not sched.get("use_dynamic_shifting", False):
            return float(sched.get("shift", 1.0))
        _, _, h, w = self.latent_shape
        return dynamic_shift((h // 2) * (w // 2), sched)


def dynamic_shift(image_tokens: int, scheduler: Mapping[str, Any]) -> float:
    """exp(mu) of the pipelines' ``calculate_shift``: mu linear in the image's token count between
    (``base_image_seq_len``, ``base_shift``) and (``max_image_seq_len``, ``max_shift``) of a scheduler config
    with dynamic shifting (FLUX.1, Qwen-Image); the harness's ``shift`` with that value samples on those sigmas."""
    base, top = scheduler.get("base_image_seq_len", 256), scheduler.get("max_image_seq_len", 4096)
    lo, hi = scheduler.get("base_shift", 0.5), scheduler.get("max_shift", 1.15)
    return math.exp(lo + (hi - lo) * (image_tokens - base) / (top - base))


def denoiser_flops(net_class: type[ImageVelocityNet], transformer: nn.Module, latent: tuple[int, int, int],
                   text_tokens: int) -> float:
    """FLOPs of one velocity forward of ``transformer`` on one still of ``latent`` (C, h, w) with ``text_tokens``
    text rows, counted by torch's FlopCounterMode on a ``meta`` twin built from the transformer's config (on
    the CPU the counter does not see the fused attention kernel; on meta it does). The image stream's and
    the text stream's weights each see only their own tokens and the adaLN modulation runs once per sample,
    which 2 x parameters x tokens overstates about 2.5x for an MMDiT (tests/plan/test_image_plan.py)."""
    from torch.utils.flop_counter import FlopCounterMode

    conf = transformer.config
    with torch.device("meta"):
        transformer = type(transformer).from_config(conf)
    p = next(transformer.parameters())
    c, h, w = latent
    text_dim = conf.get("joint_attention_dim")
    cond = TextCond({"prompt_embeds": torch.zeros(1, text_tokens, text_dim, device=p.device, dtype=p.dtype),
                     "prompt_embeds_mask": torch.ones(1, text_tokens, dtype=torch.long, device=p.device)})
    if conf.get("pooled_projection_dim"):
        cond["pooled_prompt_embeds"] = torch.zeros(1, conf.pooled_projection_dim, device=p.device, dtype=p.dtype)
    net = net_class(transformer, None)
    x = torch.zeros(1, c, 1, h, w, device=p.device, dtype=p.dtype)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        net(x, torch.full((1,), 0.5, device=p.device), cond)
    return float(counter.get_total_flops())


def tiny_text_lengths(options: Any, default: int = 16) -> int:
    """The tiny presets' T5 / Qwen text length (real checkpoints: the pipeline's own)."""
    options.max_sequence_length = options.max_sequence_length or default
    return options.max_sequence_length
