"""Wan 2.1 / Wan 2.2-TI2V text-to-video through diffusers (WanTransformer3DModel + AutoencoderKLWan,
UMT5 text encoder), and the random ``tiny-wan`` preset.

Mirrors ``diffusers/pipelines/wan/pipeline_wan.py`` (0.42):
* text: ``WanPipeline.encode_prompt`` (UMT5 last hidden state, zero-padded after the prompt's tokens
  to ``max_sequence_length`` = 512), negative prompt "" for guidance;
* transformer call: ``hidden_states=latents``, ``timestep=t`` per sample (Wan 2.2-TI2V with
  ``expand_timesteps``: t repeated per latent token, as the pipeline's all-ones mask gives it),
  ``encoder_hidden_states=prompt_embeds``; the output is the velocity (scheduler: x' = x + (s'-s) v);
* decode: ``latents * latents_std + latents_mean`` (per channel, from the VAE config), then
  ``AutoencoderKLWan.decode``.

Wan 2.2-T2V-A14B (two experts switched at ``boundary_ratio``) is not supported: it has two
transformers to adapt; a clear error says so.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.diffusers_registry import register_family
from grpo_bench.models.diffusers_video import DiffusersVideoModel
from grpo_bench.models.velocity_net import TextCond, VelocityNet

HUB_IDS = {
    "wan2.1-1.3b": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
    "wan2.1-14b": "Wan-AI/Wan2.1-T2V-14B-Diffusers",
    "wan2.2-5b": "Wan-AI/Wan2.2-TI2V-5B-Diffusers",
}
"""Named real checkpoints (loaded from the local cache or a local folder only)."""


class WanVelocityNet(VelocityNet):
    expand_timesteps: bool = False
    """Wan 2.2-TI2V: per-token timesteps (the pipeline's ``expand_timesteps``)."""

    def transformer_inputs(self, x: Tensor, timestep: Tensor, cond: TextCond, dtype: torch.dtype) -> dict[str, Any]:
        if self.expand_timesteps:
            # Wan 2.2-TI2V: one timestep per latent token (patch 1x2x2), all equal for text-to-video.
            b, _, f, h, w = x.shape
            pt, ph, pw = self.transformer.config.patch_size
            timestep = timestep[:, None].expand(b, (f // pt) * (h // ph) * (w // pw))
        return {
            "hidden_states": x,
            "timestep": timestep,
            "encoder_hidden_states": cond["prompt_embeds"].to(dtype),
        }


class WanModel(DiffusersVideoModel):
    """Wan behind the VideoModel protocol."""

    pipeline_class = "WanPipeline"
    hub_ids = HUB_IDS
    family = "Wan"
    net_class = WanVelocityNet

    def __init__(self, pipe: Any, options: AdapterOptions) -> None:
        if getattr(pipe, "transformer_2", None) is not None:
            raise UserError(
                "Wan pipelines with two experts (transformer_2, e.g. Wan2.2-T2V-A14B) are not supported; "
                "use Wan2.1-T2V (1.3B/14B) or Wan2.2-TI2V-5B"
            )
        super().__init__(pipe, options)
        self.net.expand_timesteps = bool(pipe.config.get("expand_timesteps", False))
        self.max_sequence_length = options.max_sequence_length or 512

    def vae_factors(self) -> tuple[int, int, int, int]:
        cfg = self.pipe.vae.config
        return (
            cfg.scale_factor_temporal,
            cfg.scale_factor_spatial,
            cfg.z_dim,
            self.pipe.transformer.config.patch_size[1],
        )

    def encode_batch(self, prompts: list[str]) -> TextCond:
        embeds, _ = self.pipe.encode_prompt(
            prompt=prompts,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
            device=self.encode_device,
        )  # [B, L, D]: UMT5 states, zero after each prompt's tokens
        return TextCond({"prompt_embeds": embeds})

    def vae_decode(self, x: Tensor) -> Tensor:
        vae = self.pipe.vae
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean, device=x.device).view(shape)
        std = torch.tensor(vae.config.latents_std, device=x.device).view(shape)
        return vae.decode(x.float() * std + mean, return_dict=False)[0]


# --- the tiny random preset --------------------------------------------------------------------
TINY_TEXT_LEN = 16


def tiny_wan_pipeline(seed: int = 0) -> Any:
    """A WanPipeline with random tiny components (the configs of diffusers' own Wan tests) and a
    word-level tokenizer built in code. Deterministic for a given seed."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    from grpo_bench.models._tiny_text import word_tokenizer

    tokenizer = word_tokenizer(["<pad>", "</s>"], pad="<pad>", eos="</s>", append_eos=True)
    torch.manual_seed(seed)
    text_encoder = UMT5EncoderModel(
        UMT5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                   relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    ).eval()
    torch.manual_seed(seed)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True]).eval()
    torch.manual_seed(seed)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16, out_channels=16,
        text_dim=32, freq_dim=256, ffn_dim=32, num_layers=2, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", rope_max_seq_len=32,
    )
    return WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))


def tiny_wan(options: AdapterOptions, seed: int = 0) -> WanModel:
    """``tiny-wan``: random weights, about 28k transformer parameters; 9 frames at 16x16 by default
    (latents 16 x 3 x 2 x 2)."""
    options.max_sequence_length = options.max_sequence_length or TINY_TEXT_LEN
    return WanModel(tiny_wan_pipeline(seed), options)


# --- registry entries ----------------------------------------------------------------------------
register_family(WanModel, "tiny-wan", tiny_wan)
