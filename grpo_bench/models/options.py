"""The generator's options, declared once beside the code that reads them: the run config includes them
(config/run.py, section ``generator``) and the diffusers adapters extend them (``AdapterOptions``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field

from grpo_bench.fields import AtLeast1, Float, Int, Names, NonNegative, execution, upto


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
