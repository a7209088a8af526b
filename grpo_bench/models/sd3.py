"""Stable Diffusion 3 / 3.5 text-to-image through diffusers (SD3Transformer2DModel, an MMDiT; two CLIP
text encoders and T5; AutoencoderKL), and the random ``tiny-sd3`` preset.

Mirrors ``diffusers/pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py`` (0.42):
* text: ``StableDiffusion3Pipeline.encode_prompt`` — the two CLIP encoders' penultimate hidden states
  concatenated on features and padded to T5's width, followed by T5's states (``max_sequence_length``,
  256 by default; flow_grpo's ``scripts/train_sd3.py`` encodes with 128), and the two CLIP pooled
  projections concatenated (``pooled_prompt_embeds``); the negative prompt is "";
* transformer call: ``hidden_states=latents`` [B, C, H, W], ``timestep = t`` (sigma x 1000) per sample,
  ``encoder_hidden_states``, ``pooled_projections``; the output is the velocity (x' = x + (s' - s) v);
* guidance: ``v_u + g (v_c - v_u)`` (the pipeline's), the harness's;
* decode: ``latents / scaling_factor + shift_factor``, then ``AutoencoderKL.decode``.

The scheduler's shift is fixed (3.0 for SD3.5-Medium/Large), so ``shift: 3.0`` samples on the
pipeline's sigmas up to the spacing: the harness spaces ``linspace(1, 0, T + 1)`` before the shift, the
scheduler's own ``set_timesteps(T)`` ends at its shifted sigma_min instead (as for Wan; the tests
compare both samplers on the harness's spacing).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.diffusers_image import DiffusersImageModel, ImageVelocityNet, tiny_text_lengths
from grpo_bench.models.diffusers_registry import register_family
from grpo_bench.models.velocity_net import TextCond

HUB_IDS = {
    "sd3-medium": "stabilityai/stable-diffusion-3-medium-diffusers",
    "sd3.5-medium": "stabilityai/stable-diffusion-3.5-medium",
    "sd3.5-large": "stabilityai/stable-diffusion-3.5-large",
}
"""Named real checkpoints (loaded from the local cache or a local folder only)."""


class SD3VelocityNet(ImageVelocityNet):
    def transformer_inputs(self, x: Tensor, timestep: Tensor, cond: TextCond, dtype: torch.dtype) -> dict[str, Any]:
        return {
            "hidden_states": x[:, :, 0],
            "timestep": timestep,
            "encoder_hidden_states": cond["prompt_embeds"].to(dtype),
            "pooled_projections": cond["pooled_prompt_embeds"].to(dtype),
        }


class SD3Model(DiffusersImageModel):
    """SD3 / SD3.5 behind the VideoModel protocol (one-frame clips)."""

    pipeline_class = "StableDiffusion3Pipeline"
    hub_ids = HUB_IDS
    family = "SD3"
    net_class = SD3VelocityNet
    joint_text_attention = True  # MMDiT: text and image tokens in one attention

    def __init__(self, pipe: Any, options: AdapterOptions) -> None:
        super().__init__(pipe, options)
        self.max_sequence_length = options.max_sequence_length or 256

    def token_patch(self) -> int:
        return int(self.pipe.transformer.config.patch_size)

    def encode_batch(self, prompts: list[str]) -> TextCond:
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            prompt=prompts, prompt_2=None, prompt_3=None, device=self.encode_device,
            do_classifier_free_guidance=False, max_sequence_length=self.max_sequence_length,
        )  # embeds: [B, 77 + L, D] (CLIP rows, then T5 rows), pooled: [B, 2 x CLIP projection]
        return TextCond({"prompt_embeds": embeds, "pooled_prompt_embeds": pooled})


# --- the tiny random preset --------------------------------------------------------------------
def tiny_clip_and_t5(seed: int) -> tuple[Any, ...]:
    """Word-level tokenizers built in code and random tiny CLIP / T5 encoders (the configs of diffusers'
    own SD3 and FLUX fast tests, ``tests/pipelines/stable_diffusion_3/test_pipeline_stable_diffusion_3.py``;
    their tokenizers are downloaded there, built here)."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from grpo_bench.models._tiny_text import word_tokenizer

    clip_tok = word_tokenizer(["<|startoftext|>", "<|endoftext|>"], pad="<|endoftext|>", eos="<|endoftext|>",
                              append_eos=True, model_max_length=77)
    t5_tok = word_tokenizer(["<pad>", "</s>"], pad="<pad>", eos="</s>", append_eos=True)
    clip = CLIPTextConfig(bos_token_id=0, eos_token_id=1, hidden_size=32, intermediate_size=37, layer_norm_eps=1e-05,
                          num_attention_heads=4, num_hidden_layers=5, pad_token_id=1, vocab_size=len(clip_tok),
                          hidden_act="gelu", projection_dim=32)
    t5 = T5Config(vocab_size=len(t5_tok), d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                  relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(seed)
    clip_1 = CLIPTextModelWithProjection(clip).eval()
    torch.manual_seed(seed + 1)
    clip_2 = CLIPTextModelWithProjection(clip).eval()
    torch.manual_seed(seed)
    clip_plain = CLIPTextModel(clip).eval()
    torch.manual_seed(seed)
    t5_enc = T5EncoderModel(t5).eval()
    return clip_tok, t5_tok, clip_1, clip_2, clip_plain, t5_enc


def tiny_autoencoder(seed: int, latent_channels: int) -> Any:
    """diffusers' fast-test AutoencoderKL (one stage: spatial factor 1) with SD3's shift and scale."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
                         latent_channels=latent_channels, norm_num_groups=1, use_quant_conv=False,
                         use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035).eval()


def tiny_sd3_pipeline(seed: int = 0) -> Any:
    """A StableDiffusion3Pipeline with random tiny components (diffusers' fast-test configs) and
    word-level tokenizers built in code. Deterministic for a given seed."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    clip_tok, t5_tok, clip_1, clip_2, _, t5_enc = tiny_clip_and_t5(seed)
    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(sample_size=32, patch_size=1, in_channels=4, num_layers=2, attention_head_dim=8,
                                        num_attention_heads=4, caption_projection_dim=32, joint_attention_dim=32,
                                        pooled_projection_dim=64, out_channels=4)
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=tiny_autoencoder(seed, 4),
        text_encoder=clip_1, tokenizer=clip_tok, text_encoder_2=clip_2, tokenizer_2=clip_tok,
        text_encoder_3=t5_enc, tokenizer_3=t5_tok,
    )


def tiny_sd3(options: AdapterOptions, seed: int = 0) -> SD3Model:
    """``tiny-sd3``: random weights, an MMDiT of two joint blocks (the last one context-pre-only, as in SD3.5, so
    every LoRA target of the real model exists: to_add_out lives in the others); 16 x 16 stills give latents
    4 x 1 x 16 x 16."""
    tiny_text_lengths(options)
    return SD3Model(tiny_sd3_pipeline(seed), options)


# --- registry entries ----------------------------------------------------------------------------
register_family(SD3Model, "tiny-sd3", tiny_sd3)
