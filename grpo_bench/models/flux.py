"""FLUX.1 text-to-image through diffusers (FluxTransformer2DModel with the guidance-distilled embedding;
CLIP and T5 text encoders; AutoencoderKL), and the random ``tiny-flux`` preset.

Mirrors ``diffusers/pipelines/flux/pipeline_flux.py`` (0.42):
* text: ``FluxPipeline.encode_prompt`` — T5 states (``max_sequence_length`` 512) and the CLIP pooled
  output; ``txt_ids`` zeros [L, 3];
* latents: the VAE's grid [B, C, H, W], packed into 2 x 2 patch tokens for the transformer
  (``_pack_latents``) with ``img_ids`` = (0, row, column) per token (``_prepare_latent_image_ids``);
* transformer call: ``timestep = t / 1000`` (= sigma), ``guidance`` = the distilled guidance scale per
  sample (FLUX.1-dev: ``guidance_embeds``, pipeline default 3.5, ``embedded_guidance``; FLUX.1-schnell has
  none), ``pooled_projections``, ``encoder_hidden_states``; the output tokens, unpacked, are the velocity;
* guidance: FLUX.1 is guidance-distilled: the pipeline samples without classifier-free guidance
  (``true_cfg_scale`` 1), so ``guidance: 1.0``; with ``guidance > 1`` the harness runs the pipeline's
  ``true_cfg`` formula ``v_u + g (v_c - v_u)`` on the "" prompt;
* schedule: ``sigmas = linspace(1, 1/T, T)`` (the harness's spacing) with the scheduler's exponential
  time shift at ``mu = calculate_shift(image tokens)``: the harness's ``shift`` equal to exp(mu)
  (``pipeline_shift()``: 1.88 at 512 x 512, 3.16 at 1024 x 1024) samples on the pipeline's sigmas;
* decode: ``latents / scaling_factor + shift_factor``, then ``AutoencoderKL.decode``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.diffusers_image import DiffusersImageModel, ImageVelocityNet, pack_latents, tiny_text_lengths
from grpo_bench.models.diffusers_registry import register_family
from grpo_bench.models.velocity_net import TextCond

HUB_IDS = {
    "flux.1-dev": "black-forest-labs/FLUX.1-dev",
    "flux.1-schnell": "black-forest-labs/FLUX.1-schnell",
}
"""Named real checkpoints (loaded from the local cache or a local folder only)."""
DEFAULT_EMBEDDED_GUIDANCE = 3.5
"""FluxPipeline's ``guidance_scale`` default: the value fed to the distilled guidance embedding."""


def image_ids(h: int, w: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """(0, row, column) of each 2 x 2 token of an h x w latent grid: Tensor[(h/2)(w/2), 3]."""
    ids = torch.zeros(h // 2, w // 2, 3)
    ids[..., 1] += torch.arange(h // 2)[:, None]
    ids[..., 2] += torch.arange(w // 2)[None, :]
    return ids.reshape(-1, 3).to(device=device, dtype=dtype)


class FluxVelocityNet(ImageVelocityNet):
    embedded_guidance: float | None = DEFAULT_EMBEDDED_GUIDANCE
    """The distilled guidance scale (None: a transformer without ``guidance_embeds``)."""

    def transformer_inputs(self, x: Tensor, timestep: Tensor, cond: TextCond, dtype: torch.dtype) -> dict[str, Any]:
        b, _, _, h, w = x.shape
        text = cond["prompt_embeds"]
        guidance = (None if self.embedded_guidance is None
                    else torch.full((b,), float(self.embedded_guidance), device=x.device, dtype=torch.float32))
        return {
            "hidden_states": pack_latents(x[:, :, 0]),
            "timestep": timestep.to(dtype) / 1000,
            "guidance": guidance,
            "pooled_projections": cond["pooled_prompt_embeds"].to(dtype),
            "encoder_hidden_states": text.to(dtype),
            "txt_ids": torch.zeros(text.shape[1], 3, device=x.device, dtype=dtype),
            "img_ids": image_ids(h, w, x.device, dtype),
        }


class FluxModel(DiffusersImageModel):
    """FLUX.1 behind the VideoModel protocol (one-frame clips)."""

    pipeline_class = "FluxPipeline"
    hub_ids = HUB_IDS
    family = "FLUX.1"
    net_class = FluxVelocityNet
    joint_text_attention = True

    def __init__(self, pipe: Any, options: AdapterOptions) -> None:
        super().__init__(pipe, options)
        distilled = bool(pipe.transformer.config.guidance_embeds)
        self.net.embedded_guidance = (options.embedded_guidance or DEFAULT_EMBEDDED_GUIDANCE) if distilled else None
        self.max_sequence_length = options.max_sequence_length or 512

    def latent_channels(self) -> int:
        return int(self.pipe.transformer.config.in_channels) // 4  # the pipeline's num_channels_latents

    def encode_batch(self, prompts: list[str]) -> TextCond:
        embeds, pooled, _ = self.pipe.encode_prompt(
            prompt=prompts, prompt_2=None, device=self.encode_device, max_sequence_length=self.max_sequence_length,
        )  # embeds: [B, L, D] T5 states; pooled: [B, D'] CLIP pooled output
        return TextCond({"prompt_embeds": embeds, "pooled_prompt_embeds": pooled})


# --- the tiny random preset --------------------------------------------------------------------
def tiny_flux_pipeline(seed: int = 0, guidance_embeds: bool = True) -> Any:
    """A FluxPipeline with random tiny components (diffusers' fast-test configs,
    ``tests/pipelines/flux/test_pipeline_flux.py``, with the FLUX.1-dev guidance embedding) and
    word-level tokenizers built in code. Deterministic for a given seed."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    from grpo_bench.models.sd3 import tiny_autoencoder, tiny_clip_and_t5

    clip_tok, t5_tok, _, _, clip, t5_enc = tiny_clip_and_t5(seed)
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=[4, 4, 8],
                                         guidance_embeds=guidance_embeds)
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    return FluxPipeline(scheduler=scheduler, vae=tiny_autoencoder(seed, 1), text_encoder=clip, tokenizer=clip_tok,
                        text_encoder_2=t5_enc, tokenizer_2=t5_tok, transformer=transformer)


def tiny_flux(options: AdapterOptions, seed: int = 0) -> FluxModel:
    """``tiny-flux``: random weights, one double- and one single-stream block, guidance-distilled
    embedding; 16 x 16 stills give latents 1 x 1 x 16 x 16 (64 tokens of 4 channels)."""
    tiny_text_lengths(options)
    return FluxModel(tiny_flux_pipeline(seed), options)


# --- registry entries ----------------------------------------------------------------------------
register_family(FluxModel, "tiny-flux", tiny_flux)
