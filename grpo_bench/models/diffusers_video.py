"""A diffusers text-to-video pipeline (Wan, HunyuanVideo 1.5) behind the VideoModel protocol.

The harness's kernels drive sampling; the adapter's ``VelocityNet`` (models/velocity_net.py) only maps
(x, sigma, cond) to the velocity the pipeline's transformer predicts, exactly as the pipeline feeds it.
Latents stay in the pipeline's normalised latent space (what the transformer sees); only ``decode``
undoes the normalisation (Wan: ``x * std + mean``; HunyuanVideo 1.5: ``x / scaling_factor``) and runs
the VAE, for the reward only, tiled where the VAE offers it.

Text embeddings are computed once per prompt with the pipeline's own ``encode_prompt`` and cached.
Classifier-free guidance is the harness's (``v_u + g (v_c - v_u)``, the formula of both pipelines);
``null_cond`` is the pipeline's negative prompt ("" for both).

Training modes: LoRA through peft on configurable target modules (models/lora.py: the base weights
are frozen, the adapters start at lora_B = 0), or full fine-tuning. bf16: the transformer runs under
``torch.autocast`` (LoRA: frozen base weights stored in bf16, adapters in float32).
"""

from __future__ import annotations

import contextlib
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions, cast, load_dtypes, transformer_dtype
from grpo_bench.models.base import Architecture, BaseVideoModel, save_module
from grpo_bench.models.lora import add_lora, save_lora
from grpo_bench.models.pipeline_files import load_pipeline
from grpo_bench.models.velocity_net import TextCond, VelocityNet

TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")
"""The pipeline attributes that may hold a text encoder (Wan has the first only, SD3 all three)."""


class DiffusersVideoModel(BaseVideoModel, ABC):
    """A diffusers text-to-video pipeline behind the VideoModel protocol (models/base.py).

    A family subclass declares its pipeline (``pipeline_class``, ``hub_ids``, ``family``), its
    ``net_class``, and how its text meets the video (``joint_text_attention``), and implements
    ``vae_factors``, ``encode_batch`` and ``vae_decode``.
    """

    pipeline_class: str
    """The diffusers pipeline class the family loads (model_index.json ``_class_name``)."""
    hub_ids: dict[str, str] = {}
    """Registered names of the family's real checkpoints -> hub ids."""
    family: str
    """The family's name in messages."""
    net_class: type[VelocityNet]
    negative_prompt: str = ""
    joint_text_attention: bool = False
    """Text rows join the video tokens in the transformer's self-attention (HunyuanVideo 1.5's
    double-stream blocks), rather than video tokens cross-attending to the text (Wan)."""

    @classmethod
    def from_pretrained(cls, source: str, options: AdapterOptions) -> DiffusersVideoModel:
        """The family's pipeline from a local folder or the local Hugging Face cache (a registered name
        of ``hub_ids``, or a hub id); never downloads."""
        import diffusers

        pipeline = getattr(diffusers, cls.pipeline_class)
        pipe = load_pipeline(pipeline, cls.hub_ids.get(source, source), cls.family, dtype=load_dtypes(options))
        return cls(pipe, options)

    def __init__(self, pipe: Any, options: AdapterOptions) -> None:
        self.pipe = pipe
        self.options = opts = options
        self.device = torch.device(opts.device)
        if opts.mixed_precision not in ("no", "bf16"):
            raise UserError(
                f"mixed_precision for diffusers models must be 'no' or 'bf16', got {opts.mixed_precision!r}"
            )
        bf16 = opts.mixed_precision == "bf16"
        self.weight_dtype = torch.bfloat16 if bf16 else torch.float32
        transformer = pipe.transformer
        lora = opts.lora_rank > 0
        # Frozen parts: text encoders (bf16 under mixed precision) and the VAE (float32: its decode
        # feeds the reward and is cheap next to the transformer).
        for name in TEXT_ENCODERS:
            enc = getattr(pipe, name, None)
            if enc is not None:
                cast(enc.requires_grad_(False).eval(), self.weight_dtype).to(self.device)
        cast(pipe.vae.requires_grad_(False).eval(), torch.float32).to(self.device)
        if opts.vae_tiling and hasattr(pipe.vae, "enable_tiling"):
            pipe.vae.enable_tiling()
        # LoRA: frozen base stored in the compute dtype; adapters float32 (peft autocasts them up).
        # Full fine-tuning keeps float32 master weights and autocasts the forward (param_dtype bf16:
        # bf16 weights). Cast before the move, so the device never holds a float32 copy it drops.
        cast(transformer, transformer_dtype(opts))
        transformer.to(self.device)
        if lora:
            add_lora(transformer, opts)
        else:
            transformer.requires_grad_(True)
        if opts.gradient_checkpointing:
            transformer.enable_gradient_checkpointing()
        transformer.train()  # no dropout in these transformers; train() lets checkpointing act
        self.net = self.net_class(transformer, torch.bfloat16 if bf16 else None)
        self._cache: dict[str, TextCond] = {}  # prompt -> one row, on the CPU (moved per batch)
        self.text_encoders_released = False
        self.encode_device = self.device  # where the text encoders run (the CPU once offloaded)
        self.text_encoders_offloaded = False
        self.latent_shape = self._latent_shape()

    # --- protocol ---------------------------------------------------------------------------
    def _latent_shape(self) -> tuple[int, int, int, int]:
        # Like the pipelines: frames - 1 must divide by the VAE's temporal factor and the size by
        # (spatial factor x patch); other values are rounded to the nearest valid one with a warning.
        t, s, channels, patch = self.vae_factors()
        o = self.options
        frames = max(1, round((o.frames - 1) / t)) * t + 1
        height, width = (max(1, round(v / (s * patch))) * s * patch for v in (o.height, o.width))
        if (frames, height, width) != (o.frames, o.height, o.width):
            warnings.warn(
                f"{type(self).__name__}: frames x height x width {o.frames}x{o.height}x{o.width} rounded to "
                f"{frames}x{height}x{width} (frames = 1 + k*{t}, size a multiple of {s * patch})",
                stacklevel=3,
            )
            o.frames, o.height, o.width = frames, height, width
        return (channels, (frames - 1) // t + 1, height // s, width // s)

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str]) -> TextCond:
        """Conditioning for the prompts; each distinct prompt is encoded once and cached."""
        missing = list(dict.fromkeys(p for p in prompts if p not in self._cache))
        if missing and self.text_encoders_released:
            raise UserError(f"prompt {missing[0]!r} was not encoded before the text encoders were released "
                            "(cache_prompts must see every train and eval prompt)")
        if missing:
            cond = self.encode_batch(missing)
            for i, p in enumerate(missing):
                self._cache[p] = TextCond({k: v.detach().to("cpu") for k, v in cond.rows(i).items()})
        return TextCond({k: v.to(self.device, non_blocking=True)
                         for k, v in TextCond.cat([self._cache[p] for p in prompts]).items()})

    def cache_prompts(self, prompts: Sequence[str], batch: int = 8) -> None:
        """Encode every prompt (and the negative prompt) now, ``batch`` at a time, into the CPU cache."""
        todo = list(dict.fromkeys([self.negative_prompt, *prompts]))
        for s in range(0, len(todo), batch):
            self.encode_prompts(todo[s : s + batch])

    def release_text_encoders(self, free: bool = False) -> int:
        """Take the text encoders off the accelerator once the prompts are cached (a 7B-class encoder
        would otherwise hold ~15 GB of GPU memory through training): offloaded to the CPU (a prompt
        not in the cache is then encoded there), or deleted with ``free`` (an uncached prompt is then a
        UserError). Returns the parameters taken off."""
        moved = 0
        for name in TEXT_ENCODERS:
            enc = getattr(self.pipe, name, None)
            if enc is not None:
                moved += count_params(enc)
                setattr(self.pipe, name, None if free else enc.to("cpu"))
        self.text_encoders_released = free
        self.encode_device = torch.device("cpu")
        self.text_encoders_offloaded = True
        import gc

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return moved

    def null_cond(self, n: int) -> TextCond:
        """The pipeline's negative-prompt conditioning, n times."""
        return self.encode_prompts([self.negative_prompt]).repeat_interleave(n)

    @staticmethod
    def cat_cond(a: Any, b: Any) -> TextCond:
        """Two conditionings concatenated along the batch (guidance runs one doubled batch)."""
        return TextCond.cat([a, b])

    def to(self, device: str | torch.device) -> DiffusersVideoModel:
        """Move every component (transformer, text encoders, VAE) and the prompt cache to device."""
        self.device = torch.device(device)
        offloaded = self.text_encoders_offloaded  # released: the encoders stay on the CPU
        if not offloaded:
            self.encode_device = self.device
        for name in ("transformer", "vae") if offloaded else ("transformer", *TEXT_ENCODERS, "vae"):
            module = getattr(self.pipe, name, None)
            if module is not None:
                module.to(self.device)
        return self

    def velocity(self, x: Tensor, sigma: Tensor, cond: TextCond) -> Tensor:
        """v for latents x: Tensor[B, C, F, H, W] at sigma: Tensor[B] (float32)."""
        return self.net(x, sigma, cond)

    @property
    def video_shape(self) -> tuple[int, int, int, int]:
        """(3, F, H, W) of one decoded video (the rounded frames and size)."""
        o = self.options
        return (3, o.frames, o.height, o.width)

    @torch.no_grad()
    def decode(self, x: Tensor) -> Tensor:
        """Videos Tensor[B, 3, F', H', W'] in [-1, 1] from final latents (for the reward only)."""
        out = [
            self.vae_decode(x[i : i + self.options.decode_batch])
            for i in range(0, x.shape[0], self.options.decode_batch)
        ]
        return torch.cat(out).float().clamp(-1, 1)

    def trainable_module(self) -> nn.Module:
        return self.net

    def save_policy(self, folder: Path, card: dict[str, Any], gathered: dict[int, Tensor] | None = None) -> dict:
        """LoRA: the adapters in peft's format (``adapter_config.json`` + ``adapter_model.safetensors``);
        full fine-tuning: ``transformer/`` by ``save_pretrained`` (a sharded run: the gathered tensors)."""
        transformer, folder = self.net.transformer, Path(folder)
        if self.options.lora_rank > 0:
            return save_lora(transformer, folder, self.options.lora_rank, card["model"], gathered)
        if gathered is not None:  # a sharded full fine-tune: the trainable tensors by their names in the transformer
            return save_module(transformer, folder, card, gathered)
        transformer.save_pretrained(str(folder / "transformer"), safe_serialization=True)
        return {"format": "diffusers-transformer", "weights": "transformer/", "base_model": card["model"]}

    def architecture(self) -> Architecture:
        """The pipeline's transformer, VAE and present text encoders, and the text rows one prompt gives."""
        encoders = tuple(e for e in (getattr(self.pipe, n, None) for n in TEXT_ENCODERS) if e is not None)
        return Architecture(denoiser=self.net.transformer, vae=self.pipe.vae, text_encoders=encoders,
                            text_tokens=self.text_tokens(), joint_text=self.joint_text_attention)

    def text_tokens(self) -> int:
        """Rows of text conditioning the transformer attends to for one prompt (the empty prompt's: the
        encodings are padded to a fixed length)."""
        return self.encode_prompts([""])["prompt_embeds"].shape[1]

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """The base model (LoRA adapters off) inside the block; a no-op for full fine-tuning."""
        if self.options.lora_rank <= 0:
            yield
            return
        self.net.transformer.disable_adapters()
        try:
            yield
        finally:
            self.net.transformer.enable_adapters()

    # --- sequence parallelism (models/sequence_parallel.py) ------------------------------------
    supports_sequence_parallel = True
    sequence_parallel: int = 1
    """Processes one video's tokens are split over (1: none)."""
    sequence_parallel_group: Any = None
    """The process group of those processes (None: none); each holds a partial gradient of the same rows."""

    def cp_plan(self) -> dict[str, Any] | None:
        """The transformer's context-parallel plan when diffusers declares none (None: use diffusers')."""
        return None

    def video_tokens(self) -> int:
        """Tokens of one video in the transformer (latent frames x height x width over the patch)."""
        _, f, h, w = self.latent_shape
        cfg = self.pipe.transformer.config
        p = cfg.patch_size  # Wan: (t, h, w); HunyuanVideo 1.5: spatial, with patch_size_t
        pt, ph, pw = tuple(p) if not isinstance(p, int) else (getattr(cfg, "patch_size_t", 1), p, p)
        return (f // pt) * (h // ph) * (w // pw)

    def enable_sequence_parallel(self, sp: int, device: torch.device) -> None:
        """Split every transformer forward over groups of ``sp`` processes (Ulysses); a collective: every
        rank calls it, after the process group exists and before any forward. sp = 1 changes nothing."""
        if sp <= 1:
            return
        from grpo_bench.models import sequence_parallel

        heads = int(self.pipe.transformer.config.num_attention_heads)
        sequence_parallel.check_shapes(self.family, heads, self.video_tokens(), sp)
        config = sequence_parallel.enable(self.pipe.transformer, sp, device, self.cp_plan())
        self.sequence_parallel = sp
        self.sequence_parallel_group = config.context_parallel_config._ulysses_mesh.get_group()

    # --- per-model hooks ----------------------------------------------------------------------
    @abstractmethod
    def vae_factors(self) -> tuple[int, int, int, int]:
        """(temporal factor, spatial factor, latent channels, transformer spatial patch)."""

    @abstractmethod
    def encode_batch(self, prompts: list[str]) -> TextCond:
        """Conditioning for distinct prompts with the pipeline's own ``encode_prompt``."""

    @abstractmethod
    def vae_decode(self, x: Tensor) -> Tensor:
        """Undo the latent normalisation and decode: Tensor[b, 3, F', H', W'] (about [-1, 1])."""


def count_params(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
