"""The generator's options, declared once beside the code that reads them: the run config includes them
(config/run.py, section ``generator``) and the diffusers adapters extend them (``AdapterOptions``); and
``ModelSection``, all a model factory reads of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field

from grpo_bench.fields import AtLeast1, Float, Int, Name, Names, NonNegative, execution, upto


@dataclass
class GeneratorOptions:
    """The generator section: how a real video model is set up for RL (the world ignores it). Declared
    here, beside the adapters that read it (adapter_options.py ``AdapterOptions`` extends it); the run
    config includes it as its ``generator`` section."""

    lora_rank: Int = 0
    """LoRA rank (0 = full fine-tuning)."""
    lora_alpha: Float = 0.0
    """LoRA alpha (0 = equal to the rank)."""
    lora_targets: Names = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0"])
    """Module names LoRA wraps."""
    gradient_checkpointing: bool = execution(False)
    """Recompute activations in the backward pass."""
    param_dtype: Literal["float32", "bf16"] = "float32"
    """Full fine-tuning: dtype the trained weights are stored in, 'float32' (master weights; the forward
    autocasts under mixed_precision) or 'bf16' (bf16 parameters and AdamW state, the paper's FSDP2 recipe)."""
    frames: Annotated[Int, upto(1024)] = 8
    """Frames per video (real models: latent frames follow the VAE)."""
    height: Annotated[AtLeast1, upto(4096)] = 16
    width: Annotated[AtLeast1, upto(4096)] = 16
    embedded_guidance: Annotated[Float, Field(ge=0)] = 0.0
    """FLUX.1's guidance-distilled embedding: the guidance scale fed to the transformer (0 = the pipeline's
    default, 3.5; models without the embedding ignore it). Not classifier-free guidance (``guidance``)."""
    max_text_tokens: Annotated[NonNegative, upto(4096)] = 0
    """Text tokens of the T5 / Qwen2.5-VL encoding (0 = the pipeline's default: SD3 256, FLUX 512, Qwen-Image 512,
    Wan 512)."""


@dataclass
class ModelSection(GeneratorOptions):
    """What a model factory reads of a run: which generator, the generator section, the world's video size and
    where and in what precision it computes. Its fields are run-config keys of the same names, so a run config's
    is ``section(cfg, ModelSection)`` (config/sections.py), the one place it is assembled; ``models.from_section``
    builds the model it names, and every factory receives it as ``section=`` (None: the factory's own defaults),
    never the run config."""

    model: Name = "world"
    """Generator: a registered name, a hub id or a local pipeline folder (run-config key ``model``)."""
    video_size: Annotated[Int, upto(512)] = 16
    """The embedded world's video height/width (the diffusers adapters read ``height`` and ``width``)."""
    device: Name = "auto"
    """'auto', 'cpu', 'cuda' or 'cuda:N' (the diffusers adapters load onto it; 'auto' and 'cuda': this process's
    GPU when there is one)."""
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = "auto"
    """The run's compute precision; a diffusers adapter stores a LoRA base in it ('auto' is fp32 there)."""
