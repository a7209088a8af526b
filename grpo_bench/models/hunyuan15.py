"""HunyuanVideo 1.5 text-to-video through diffusers (HunyuanVideo15Transformer3DModel +
AutoencoderKLHunyuanVideo15; Qwen2.5-VL text model and ByT5 glyph encoder), and the random
``tiny-hunyuan15`` preset.

Mirrors ``diffusers/pipelines/hunyuan_video1_5/pipeline_hunyuan_video1_5.py`` (0.42):
* text: ``HunyuanVideo15Pipeline.encode_prompt`` — Qwen2.5-VL hidden states (3rd from last) of the
  chat-templated prompt with the system prefix cropped, plus ByT5 embeddings of quoted glyph text
  (zeros and a zero mask when the prompt quotes nothing); the negative prompt is "";
* transformer input: ``cat([latents, zeros (image-condition latents), zeros (mask)], dim=1)``,
  ``image_embeds`` zeros [B, vision_num_semantic_tokens, image_embed_dim] (text-to-video),
  ``timestep = t`` in the transformer's dtype, both text streams with their masks;
* guidance: the pipeline's ``ClassifierFreeGuidance`` is ``v_u + g (v_c - v_u)``, the harness's;
* decode: ``latents / scaling_factor`` then ``AutoencoderKLHunyuanVideo15.decode``.

The pipeline's default schedule is ``sigmas = linspace(1, 0, T+1)[:-1]`` shifted by the scheduler's
``shift``, which is exactly the harness's ``schedule.sigmas(T, shift)``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.diffusers_registry import register_family
from grpo_bench.models.diffusers_video import DiffusersVideoModel
from grpo_bench.models.velocity_net import TextCond, VelocityNet

HUB_IDS = {
    "hunyuan15-480p": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v",
    "hunyuan15-720p": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_t2v",
}
"""Named real checkpoints (loaded from the local cache or a local folder only)."""


class HunyuanVelocityNet(VelocityNet):
    num_semantic_tokens: int = 729
    """Rows of the (zero) image embedding for text-to-video; the pipeline's vision_num_semantic_tokens."""
    text_padding: int = 0
    """Masked rows appended to the Qwen2.5-VL stream so that sequence parallelism divides the text rows
    (models/sequence_parallel.py); masked keys change no valid token and text rows are not output."""

    def transformer_inputs(self, x: Tensor, timestep: Tensor, cond: TextCond, dtype: torch.dtype) -> dict[str, Any]:
        b, c, f, h, w = x.shape
        # Text-to-video: zero image-condition latents and a zero mask, concatenated on channels.
        model_in = torch.cat([x, x.new_zeros(b, c, f, h, w), x.new_zeros(b, 1, f, h, w)], dim=1)
        image_embeds = x.new_zeros(b, self.num_semantic_tokens, self.transformer.config.image_embed_dim)
        t = cond
        if self.text_padding:  # zero rows, mask 0: [B, L, D] -> [B, L + pad, D]
            t = {**t, "prompt_embeds": F.pad(t["prompt_embeds"], (0, 0, 0, self.text_padding)),
                 "prompt_embeds_mask": F.pad(t["prompt_embeds_mask"], (0, self.text_padding))}
        return {
            "hidden_states": model_in,
            "image_embeds": image_embeds,
            "timestep": timestep.to(dtype),
            "encoder_hidden_states": t["prompt_embeds"].to(dtype),
            "encoder_attention_mask": t["prompt_embeds_mask"].to(dtype),
            "encoder_hidden_states_2": t["prompt_embeds_2"].to(dtype),
            "encoder_attention_mask_2": t["prompt_embeds_mask_2"].to(dtype),
        }


class HunyuanVideo15Model(DiffusersVideoModel):
    """HunyuanVideo 1.5 behind the VideoModel protocol."""

    pipeline_class = "HunyuanVideo15Pipeline"
    hub_ids = HUB_IDS
    family = "HunyuanVideo 1.5"
    net_class = HunyuanVelocityNet
    joint_text_attention = True

    def __init__(self, pipe: Any, options: AdapterOptions) -> None:
        if options.efficient_attention:
            from grpo_bench.models.hunyuan_attention import use_key_padding_attention

            use_key_padding_attention(pipe.transformer)
        super().__init__(pipe, options)
        self.net.num_semantic_tokens = pipe.vision_num_semantic_tokens

    def cp_plan(self) -> dict[str, Any] | None:
        """diffusers 0.42 declares no context-parallel plan for this transformer: the project's."""
        from grpo_bench.models.sequence_parallel import hunyuan15_cp_plan

        return hunyuan15_cp_plan()

    def enable_sequence_parallel(self, sp: int, device: torch.device) -> None:
        """As the base class, with the key-padding attention (the only processor whose mask Ulysses can
        gather) and the text rows padded to a multiple of sp."""
        if sp <= 1:
            return
        from grpo_bench.models.hunyuan_attention import use_key_padding_attention
        from grpo_bench.models.sequence_parallel import text_rows_padding

        use_key_padding_attention(self.pipe.transformer)  # a no-op where it is installed already
        self.net.text_padding = text_rows_padding(self.text_tokens(), sp)
        super().enable_sequence_parallel(sp, device)

    def vae_factors(self) -> tuple[int, int, int, int]:
        vae = self.pipe.vae
        return (vae.temporal_compression_ratio, vae.spatial_compression_ratio, vae.config.latent_channels,
                self.pipe.transformer.config.patch_size)

    def text_tokens(self) -> int:
        """The rows that join the video tokens in self-attention: Qwen2.5-VL's, ByT5's glyph rows and the
        image rows (as models/real_specs.yaml's ``text_tokens``, 1000 + 256 + 729 for the checkpoint)."""
        masks = self.encode_prompts([""])
        return (masks["prompt_embeds_mask"].shape[1] + masks["prompt_embeds_mask_2"].shape[1]
                + self.pipe.vision_num_semantic_tokens)

    def encode_batch(self, prompts: list[str]) -> TextCond:
        e, m, e2, m2 = self.pipe.encode_prompt(prompt=prompts, device=self.encode_device, batch_size=len(prompts))
        # e: [B, L, D] Qwen2.5-VL states, m: [B, L]; e2: [B, L2, D2] ByT5 glyph states, m2: [B, L2]
        return TextCond(
            {"prompt_embeds": e, "prompt_embeds_mask": m, "prompt_embeds_2": e2, "prompt_embeds_mask_2": m2}
        )

    def vae_decode(self, x: Tensor) -> Tensor:
        vae = self.pipe.vae
        return vae.decode(x.float() / vae.config.scaling_factor, return_dict=False)[0]


# --- the tiny random preset --------------------------------------------------------------------
SYSTEM_WORDS = "system message"  # stands in for the pipeline's long system prompt


def tiny_hunyuan15_pipeline(seed: int = 0) -> Any:
    """A HunyuanVideo15Pipeline with random tiny components (the configs of diffusers' own tests), a
    word-level chat tokenizer built in code, and short text lengths. Deterministic for a seed."""
    from diffusers import (
        AutoencoderKLHunyuanVideo15,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideo15Pipeline,
        HunyuanVideo15Transformer3DModel,
    )
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import ByT5Tokenizer, Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel, T5Config, T5EncoderModel

    from grpo_bench.models._tiny_text import word_tokenizer

    template = (
        "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
        "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
    )
    tokenizer = word_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], pad="<|endoftext|>",
                               eos="<|im_end|>", chat_template=template, extra=SYSTEM_WORDS.split())
    torch.manual_seed(seed)
    transformer = HunyuanVideo15Transformer3DModel(
        in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=1,
        num_refiner_layers=1, mlp_ratio=2.0, patch_size=1, patch_size_t=1, text_embed_dim=16,
        text_embed_2_dim=32, image_embed_dim=12, rope_axes_dim=(2, 2, 4), target_size=16, task_type="t2v",
    )
    torch.manual_seed(seed)
    vae = AutoencoderKLHunyuanVideo15(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 16), layers_per_block=1,
        spatial_compression_ratio=4, temporal_compression_ratio=2, downsample_match_channel=False,
        upsample_match_channel=False,
    ).eval()
    torch.manual_seed(seed)
    text_encoder = Qwen2_5_VLTextModel(
        Qwen2_5_VLTextConfig(
            hidden_size=16, intermediate_size=16, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2,
            vocab_size=len(tokenizer), bos_token_id=1, eos_token_id=2, pad_token_id=0, rope_theta=1e6,
            rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
        )
    ).eval()
    torch.manual_seed(seed)
    text_encoder_2 = T5EncoderModel(
        T5Config(vocab_size=384, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                 relative_attention_num_buckets=8, decoder_start_token_id=0)
    ).eval()
    pipe = HunyuanVideo15Pipeline(
        text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer, vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), text_encoder_2=text_encoder_2,
        tokenizer_2=ByT5Tokenizer(), guider=ClassifierFreeGuidance(guidance_scale=1.0),
    )
    apply_tiny_lengths(pipe)
    return pipe


def apply_tiny_lengths(pipe: Any) -> None:
    """Short text lengths for the tiny preset (the real ones are 1000 + 108 and 256 tokens, 729
    image rows). The crop equals the tokenised system prefix, as 108 is for the real tokenizer."""
    pipe.system_message = SYSTEM_WORDS
    prefix = pipe.tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM_WORDS}, {"role": "user", "content": ""}],
        tokenize=False,
        add_generation_prompt=False,
    )
    pipe.prompt_template_encode_start_idx = len(pipe.tokenizer(prefix.rsplit("<|im_end|>", 1)[0])["input_ids"])
    pipe.tokenizer_max_length = 16
    pipe.tokenizer_2_max_length = 8
    pipe.vision_num_semantic_tokens = 4


def tiny_hunyuan15(options: AdapterOptions, seed: int = 0) -> HunyuanVideo15Model:
    """``tiny-hunyuan15``: random weights; 9 frames at 16x16 give latents 4 x 5 x 4 x 4."""
    return HunyuanVideo15Model(tiny_hunyuan15_pipeline(seed), options)


# --- registry entries ----------------------------------------------------------------------------
register_family(HunyuanVideo15Model, "tiny-hunyuan15", tiny_hunyuan15)
