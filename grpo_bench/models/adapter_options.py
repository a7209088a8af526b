"""How a diffusers model is set up for RL (``AdapterOptions``) and the dtypes those options give each
component: stored, loaded (``from_pretrained``'s ``dtype``) and cast to."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from grpo_bench.models.options import GeneratorOptions, ModelSection


@dataclass
class AdapterOptions(GeneratorOptions):
    """How a diffusers model is set up for RL: the run config's generator section (models/options.py:
    frames, size, LoRA, gradient checkpointing, stored dtype) and what only the adapter decides."""

    mixed_precision: str = "no"
    """'no' (float32) or 'bf16' (autocast; LoRA base weights stored in bf16)."""
    device: str = "cpu"
    vae_tiling: bool = True
    """Tiled VAE decode where the VAE offers it (saves memory at real resolutions)."""
    decode_batch: int = 1
    """Videos decoded per VAE call."""
    max_sequence_length: int | None = None
    """Text tokens (None = the pipeline's default)."""
    efficient_attention: bool = True
    """HunyuanVideo 1.5: key-padding attention mask instead of diffusers' dense L x L one (same output)."""

    @classmethod
    def from_section(cls, section: ModelSection, **overrides: Any) -> AdapterOptions:
        """Options from a run's model section: its generator options, compute precision and device; keywords
        override any field."""
        kw: dict[str, Any] = {f.name: getattr(section, f.name) for f in dataclasses.fields(GeneratorOptions)}
        # a real model's 'auto' is fp32 compute (train/precision.py)
        kw["mixed_precision"] = "no" if section.mixed_precision == "auto" else section.mixed_precision
        if section.device not in ("auto", "cuda"):
            kw["device"] = section.device
        elif torch.cuda.is_available():  # under accelerate launch: this process's GPU
            kw["device"] = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        if section.max_text_tokens:
            kw["max_sequence_length"] = section.max_text_tokens
        kw.update(overrides)
        return cls(**kw)


def transformer_dtype(opts: AdapterOptions) -> torch.dtype:
    """Storage dtype of the transformer: the compute dtype for a frozen LoRA base, else param_dtype."""
    if opts.lora_rank > 0:
        return torch.bfloat16 if opts.mixed_precision == "bf16" else torch.float32
    return torch.bfloat16 if opts.param_dtype == "bf16" else torch.float32


def load_dtypes(opts: AdapterOptions) -> dict[str, torch.dtype]:
    """The load dtype (``dtype``) for ``from_pretrained`` per component: each weight is materialised once, in the
    dtype it is used in (with accelerate's low-CPU-memory loading, no float32 host copy of a bf16
    component): transformer as ``transformer_dtype``, text encoders in the compute dtype, VAE float32."""
    compute = torch.bfloat16 if opts.mixed_precision == "bf16" else torch.float32
    return {"default": compute, "transformer": transformer_dtype(opts), "vae": torch.float32}


def cast(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast floating parameters and buffers to dtype, except the modules the model keeps in float32
    (diffusers' ``_keep_in_fp32_modules``: norms, time embedders, RoPE)."""
    keep = tuple(getattr(module, "_keep_in_fp32_modules", None) or ())
    for name, sub in module.named_modules():
        target = torch.float32 if keep and any(k in name.split(".") for k in keep) else dtype
        for t in [*sub.parameters(recurse=False), *sub.buffers(recurse=False)]:
            if t.is_floating_point() and t.dtype != target:
                t.data = t.data.to(target)
    return module
