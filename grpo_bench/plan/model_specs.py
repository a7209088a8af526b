"""The ``ModelSpec`` of a run's model (its ``ModelSection``), without reading a weight.

* a named real checkpoint (``models/real_specs.yaml``): its transformer, VAE and text encoders are
  built from their configs on PyTorch's ``meta`` device and counted;
* a local pipeline folder: planned as the named checkpoint its ``transformer/config.json`` matches;
* any other registered model (the tiny presets, the world): built at random from the registry and read
  off the networks it declares (``VideoModel.architecture``, models/base.py).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import torch
import yaml

from grpo_bench.errors import UserError
from grpo_bench.models.options import ModelSection
from grpo_bench.plan.spec import (
    ModelSpec,
    latent_geometry,
    lora_and_block,
    parameter_count,
    patch_size,
    vae_decode_profile,
)

SPECS = Path(__file__).resolve().parents[1] / "models" / "real_specs.yaml"


def real_specs() -> dict[str, Any]:
    return yaml.safe_load(SPECS.read_text())


def model_spec(section: ModelSection) -> ModelSpec:
    """The spec of a run's model (its model section, ``section(cfg, ModelSection)``) at the run's frames and size
    (no weights are read)."""
    specs = real_specs()
    name = section.model if section.model in specs else identify_folder(section.model)
    if name is None:
        return built_spec(section)
    s = specs[name]
    tr, text, vae, lora, block = _meta_counts(name, section.lora_rank, tuple(section.lora_targets))
    f, h, w = latent_geometry(section.frames, section.height, section.width, s["vae_temporal"], s["vae_spatial"],
                              s["patch"][1])
    if s.get("modality") == "image":  # a still: one latent frame, one decoded frame
        f = 1
    video = ((f - 1) * s["vae_temporal"] + 1, h * s["vae_spatial"], w * s["vae_spatial"])
    flops, top, tile = _meta_vae(name)
    tokens = text_tokens(s, section.max_text_tokens)
    forward = _meta_forward_flops(name, (s["latent_channels"], h, w), tokens) if s.get("modality") == "image" else 0.0
    return ModelSpec(name, tr, text, vae, s["hidden"], s["layers"], (s["latent_channels"], f, h, w),
                     tuple(s["patch"]), tokens, s["joint_text"], lora, block, video, flops, top, tile, forward)


IMAGE_NETS = {"sd3": ("grpo_bench.models.sd3", "SD3VelocityNet"), "flux": ("grpo_bench.models.flux", "FluxVelocityNet"),
              "qwen_image": ("grpo_bench.models.qwen_image", "QwenImageVelocityNet")}
"""An image family of models/real_specs.yaml -> the velocity net that feeds its transformer."""


@functools.lru_cache(maxsize=32)
def _meta_forward_flops(name: str, latent: tuple[int, int, int], tokens: int) -> float:
    """One still's denoiser forward FLOPs of a named image checkpoint, counted on ``meta``; 0 (the plan's
    estimate) when the transformer cannot run on meta."""
    import importlib

    import diffusers

    from grpo_bench.models.diffusers_image import denoiser_flops

    spec = real_specs()[name]
    module, cls = IMAGE_NETS[spec["family"]]
    with torch.device("meta"):
        tr = getattr(diffusers, spec["transformer"]["class"])(**spec["transformer"]["config"])
    try:
        return denoiser_flops(getattr(importlib.import_module(module), cls), tr, latent, tokens)
    except Exception:  # e.g. a data-dependent step on meta: fall back to the estimate
        return 0.0


def text_tokens(spec: dict[str, Any], chosen: int) -> int:
    """Text rows per prompt: the spec's default, or (the run's ``max_text_tokens`` ``chosen``, 0: not set) the CLIP
    rows SD3 puts before the T5 rows plus that length."""
    return spec.get("clip_tokens", 0) + chosen if chosen else spec["text_tokens"]


def identify_folder(source: str) -> str | None:
    """The named checkpoint a local pipeline folder holds, from its transformer/config.json (class,
    layers, heads, input channels); None when it is not a folder or matches none."""
    import json

    conf_path = Path(source).expanduser() / "transformer" / "config.json"
    if not conf_path.is_file():
        return None
    conf = json.loads(conf_path.read_text())
    keys = ("num_layers", "num_attention_heads", "attention_head_dim", "in_channels")
    for name, s in real_specs().items():
        ref = s["transformer"]["config"]
        if s["transformer"]["class"] == conf.get("_class_name") and all(conf.get(k) == ref.get(k) for k in keys):
            return name
    return None


# --- named checkpoints, on meta ------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def _meta_counts(name: str, rank: int, targets: tuple[str, ...]) -> tuple[int, int, int, int, int]:
    """(transformer, text encoders, VAE, LoRA, largest block) parameters of a real model, built on meta."""
    import diffusers
    import transformers

    spec = real_specs()[name]
    with torch.device("meta"):
        tr = getattr(diffusers, spec["transformer"]["class"])(**spec["transformer"]["config"])
        vae = getattr(diffusers, spec["vae"]["class"])(**spec["vae"]["config"])
        text = 0
        for enc in spec["text_encoders"]:
            conf = getattr(transformers, enc["config_class"])(**enc["config"])
            text += parameter_count(getattr(transformers, enc["class"])(conf))
    lora, block = lora_and_block(tr, rank, list(targets))
    return parameter_count(tr), text, parameter_count(vae), lora, block


@functools.lru_cache(maxsize=16)
def _meta_vae(name: str) -> tuple[float, int, tuple[int, int] | None]:
    import diffusers

    spec = real_specs()[name]
    with torch.device("meta"):
        vae = getattr(diffusers, spec["vae"]["class"])(**spec["vae"]["config"])
    return vae_decode_profile(vae, spec["latent_channels"])


# --- registered models, built --------------------------------------------------------------------
def built_spec(section: ModelSection) -> ModelSpec:
    """A spec read off an instantiated model (the tiny presets; any model the registry builds) of a run's model
    section, from the networks it declares (``architecture()``); built without LoRA, whose size is counted here."""
    from grpo_bench import models

    if section.model not in models.names():
        raise UserError(f"plan: model {section.model!r} has no architecture spec (known: "
                        f"{', '.join(sorted(real_specs()))}, or a registered preset); a local folder is planned "
                        "as the named model it holds")
    without_lora = dataclasses.replace(section, lora_rank=0)
    model = models.build(section.model, section=without_lora, pretrained=False)
    arch = model.architecture()
    tr = arch.denoiser
    lora, block = lora_and_block(tr, section.lora_rank, list(section.lora_targets))
    c, f, h, w = model.latent_shape
    video = tuple(model.video_shape[1:])
    if arch.vae is None:  # latents are pixels (the embedded world's UNet): one "token" per latent position
        return ModelSpec(section.model, parameter_count(tr), 0, 0, hidden=max(c, 1), layers=1, latent=(c, f, h, w),
                         patch=(1, 1, 1), text_tokens=0, joint_text=False, block_params=block, video=video)
    conf = tr.config
    flops, top, tile = vae_decode_profile(arch.vae, c)
    layers = conf.num_layers + conf.get("num_single_layers", 0)  # FLUX: double- and single-stream blocks
    return ModelSpec(section.model, parameter_count(tr), sum(parameter_count(e) for e in arch.text_encoders),
                     parameter_count(arch.vae), conf.num_attention_heads * conf.attention_head_dim, layers,
                     (c, f, h, w), arch.token_patch or patch_size(conf), arch.text_tokens, arch.joint_text, lora,
                     block, video, flops, top, tile, arch.forward_flops)
