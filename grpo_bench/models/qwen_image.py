"""Qwen-Image text-to-image through diffusers (QwenImageTransformer2DModel, an MMDiT; the Qwen2.5-VL text
model; AutoencoderKLQwenImage), and the random ``tiny-qwen-image`` preset.

Mirrors ``diffusers/pipelines/qwenimage/pipeline_qwenimage.py`` (0.42):
* text: ``QwenImagePipeline.encode_prompt`` — the last hidden states of the templated prompt with the
  template's first ``prompt_template_encode_start_idx`` (34) tokens dropped, and their mask. The pipeline
  pads a batch to its longest prompt; the adapter caches each prompt padded to ``max_sequence_length``
  (512, the pipeline's default cut) with a zero mask, which the transformer's joint attention mask and
  text RoPE positions make exactly equivalent (tests: the harness equals the pipeline);
* latents: the VAE's grid [B, C, 1, H, W] (a video VAE with one frame), packed into 2 x 2 patch tokens
  (``_pack_latents``), ``img_shapes = [(1, H/2, W/2)]``;
* transformer call: ``timestep = t / 1000`` (= sigma), no guidance embedding; the unpacked output is the
  velocity;
* guidance: the pipeline's ``true_cfg_scale`` rescales the guided prediction to the conditional one's
  norm per token (``comb * |v_c| / |comb|``): ``guidance_formula: norm_rescaled`` (core/sampling.py, the
  qwen-image recipe's default for ``train --model qwen-image``); the plain ``cfg`` formula is not the
  pipeline's at ``guidance > 1`` (tests/models/test_image_models.py compares both with the pipeline);
* schedule: ``sigmas = linspace(1, 1/T, T)`` with an exponential shift at ``mu = calculate_shift(image
  tokens)`` (``pipeline_shift()``), then the scheduler's ``shift_terminal`` (0.02 for Qwen/Qwen-Image)
  stretches the schedule to end there: the harness has no terminal stretch;
* decode: ``latents * latents_std + latents_mean`` (per channel), then ``AutoencoderKLQwenImage.decode``
  of one frame.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.diffusers_image import DiffusersImageModel, ImageVelocityNet, pack_latents, tiny_text_lengths
from grpo_bench.models.diffusers_registry import register_family
from grpo_bench.models.velocity_net import TextCond

HUB_IDS = {"qwen-image": "Qwen/Qwen-Image"}
"""Named real checkpoints (loaded from the local cache or a local folder only)."""


class QwenImageVelocityNet(ImageVelocityNet):
    def transformer_inputs(self, x: Tensor, timestep: Tensor, cond: TextCond, dtype: torch.dtype) -> dict[str, Any]:
        b, _, _, h, w = x.shape
        return {
            "hidden_states": pack_latents(x[:, :, 0]),
            "timestep": timestep.to(dtype) / 1000,
            "guidance": None,
            "encoder_hidden_states": cond["prompt_embeds"].to(dtype),
            "encoder_hidden_states_mask": cond["prompt_embeds_mask"],
            "img_shapes": [[(1, h // 2, w // 2)]] * b,
        }


class QwenImageModel(DiffusersImageModel):
    """Qwen-Image behind the VideoModel protocol (one-frame clips)."""

    pipeline_class = "QwenImagePipeline"
    hub_ids = HUB_IDS
    family = "Qwen-Image"
    net_class = QwenImageVelocityNet
    joint_text_attention = True

    def __init__(self, pipe: Any, options: AdapterOptions) -> None:
        super().__init__(pipe, options)
        self.max_sequence_length = options.max_sequence_length or 512

    def latent_channels(self) -> int:
        return int(self.pipe.vae.config.z_dim)

    def encode_batch(self, prompts: list[str]) -> TextCond:
        embeds, mask = self.pipe.encode_prompt(prompt=prompts, device=self.encode_device,
                                               max_sequence_length=self.max_sequence_length)
        b, n, d = embeds.shape  # padded to the batch's longest prompt; mask None when nothing is padded
        mask = torch.ones(b, n, dtype=torch.long, device=embeds.device) if mask is None else mask
        length = self.max_sequence_length
        full = embeds.new_zeros(b, length, d)
        full[:, :n] = embeds[:, :length]
        full_mask = mask.new_zeros(b, length)
        full_mask[:, :n] = mask[:, :length]
        return TextCond({"prompt_embeds": full, "prompt_embeds_mask": full_mask})

    def text_tokens(self) -> int:
        return self.max_sequence_length

    def vae_decode(self, x: Tensor) -> Tensor:
        vae = self.pipe.vae
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean, device=x.device).view(shape)
        std = torch.tensor(vae.config.latents_std, device=x.device).view(shape)
        return vae.decode(x.float() * std + mean, return_dict=False)[0][:, :, :1]


# --- the tiny random preset --------------------------------------------------------------------
TEMPLATE_WORDS = "system describe the image user"
"""Stands in for the pipeline's long system template (the tiny tokenizer knows these words)."""


def tiny_qwen_image_pipeline(seed: int = 0) -> Any:
    """A QwenImagePipeline with random tiny components (diffusers' fast-test configs,
    ``tests/pipelines/qwenimage/test_qwenimage.py``; the Qwen2.5-VL text model alone), a word-level
    tokenizer built in code and a short prompt template. Deterministic for a given seed."""
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    from grpo_bench.models._tiny_text import word_tokenizer

    tokenizer = word_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], pad="<|endoftext|>",
                               eos="<|im_end|>", extra=TEMPLATE_WORDS.split())
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                              attention_head_dim=16, num_attention_heads=3, joint_attention_dim=16,
                                              guidance_embeds=False, axes_dims_rope=(8, 4, 4))
    torch.manual_seed(seed)
    vae = AutoencoderKLQwenImage(base_dim=24, z_dim=4, dim_mult=[1, 2, 4], num_res_blocks=1,
                                 temperal_downsample=[False, True], latents_mean=[0.0] * 4,
                                 latents_std=[1.0] * 4).eval()
    torch.manual_seed(seed)
    text_encoder = Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
        hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=len(tokenizer), bos_token_id=1, eos_token_id=2, pad_token_id=0, rope_theta=1e6,
        rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
    )).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                                base_image_seq_len=256, max_image_seq_len=8192,
                                                time_shift_type="exponential")
    pipe = QwenImagePipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                             transformer=transformer)
    apply_tiny_template(pipe)
    return pipe


def apply_tiny_template(pipe: Any) -> None:
    """A short template and the crop that equals its tokenised prefix (as 34 is for the real tokenizer)."""
    pipe.prompt_template_encode = "<|im_start|> system describe the image <|im_end|> <|im_start|> user {} <|im_end|>"
    prefix = pipe.prompt_template_encode.split("{}")[0]
    pipe.prompt_template_encode_start_idx = len(pipe.tokenizer(prefix)["input_ids"])


def tiny_qwen_image(options: AdapterOptions, seed: int = 0) -> QwenImageModel:
    """``tiny-qwen-image``: random weights, two joint blocks; 16 x 16 stills give latents 4 x 1 x 4 x 4
    (a VAE of spatial factor 4; 4 tokens of 16 channels)."""
    tiny_text_lengths(options)
    return QwenImageModel(tiny_qwen_image_pipeline(seed), options)


# --- registry entries ----------------------------------------------------------------------------
register_family(QwenImageModel, "tiny-qwen-image", tiny_qwen_image)
