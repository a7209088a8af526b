"""Shared adapter logic for diffusers text-to-video pipelines (Wan, HunyuanVideo 1.5).

The harness's kernels drive sampling; an adapter only maps (x, sigma, cond) to the velocity the
pipeline's transformer predicts, exactly as the diffusers pipeline feeds it:

* timestep = sigma * num_train_timesteps (1000), as ``FlowMatchEulerDiscreteScheduler`` sets
  ``timesteps = sigmas * 1000``;
* velocity sign: the scheduler's Euler step is ``x' = x + (sigma' - sigma) * model_output``, i.e.
  ``x - Delta * v`` with v = model_output; the harness's ODE step is the same, so v is the raw output;
* latents stay in the pipeline's normalised latent space (what the transformer sees); only
  ``decode`` undoes the normalisation (Wan: ``x * std + mean``; HunyuanVideo 1.5: ``x / scaling_factor``)
  and runs the VAE, for the reward only, tiled where the VAE offers it.

Text embeddings are computed once per prompt with the pipeline's own ``encode_prompt`` and cached.
Classifier-free guidance is the harness's (``v_u + g (v_c - v_u)``, the formula of both pipelines);
``null_cond`` is the pipeline's negative prompt ("" for both).

Training modes: LoRA through peft (``ModelMixin.add_adapter`` → ``peft.inject_adapter_in_model``
with a ``LoraConfig`` on configurable target modules; the base weights are frozen, so the initial
snapshot of the trainable parameters (lora_B = 0) is exactly "adapters disabled"), or full
fine-tuning. bf16: the transformer runs under ``torch.autocast`` (LoRA: frozen base weights stored in
bf16, adapters in float32), its output is returned in float32 so kernels and log-probs stay float32.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.models.base import BaseVideoModel, save_module
from grpo_bench.models.options import GeneratorOptions
from grpo_bench.registry import Registry

NUM_TRAIN_TIMESTEPS = 1000


# --- conditioning ---------------------------------------------------------------------------
class TextCond(dict):
    """Prompt conditioning: a dict of named tensors (embeddings, masks), each batched along dim 0.
    A plain dict subclass, so the rollout's pytree helpers (cat/index) handle it as any dict."""

    def __len__(self) -> int:  # the batch size, not the number of keys
        return next(iter(self.values())).shape[0]

    def rows(self, idx: Any) -> TextCond:
        if isinstance(idx, int):
            idx = slice(idx, idx + 1)
        return TextCond({k: v[idx] for k, v in self.items()})

    def repeat_interleave(self, n: int) -> TextCond:
        return TextCond({k: v.repeat_interleave(n, dim=0) for k, v in self.items()})

    @staticmethod
    def cat(conds: Sequence[Any]) -> TextCond:
        keys = list(conds[0].keys())
        return TextCond({k: torch.cat([c[k] for c in conds], dim=0) for k in keys})


# --- options ---------------------------------------------------------------------------------
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
    def from_config(cls, cfg: Any, **overrides: Any) -> AdapterOptions:
        """Options from a RunConfig: its generator section and its compute precision."""
        names = [f.name for f in dataclasses.fields(GeneratorOptions)] + ["mixed_precision"]
        kw = {n: getattr(cfg, n) for n in names if hasattr(cfg, n)}
        if kw.get("mixed_precision") == "auto":  # a real model's 'auto' is fp32 compute (train/precision.py)
            kw["mixed_precision"] = "no"
        if hasattr(cfg, "device") and cfg.device not in ("auto", "cuda"):
            kw["device"] = cfg.device
        elif torch.cuda.is_available():  # under accelerate launch: this process's GPU
            kw["device"] = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        kw.update(overrides)
        return cls(**kw)


# --- the velocity network (the trainable module) -----------------------------------------------
class VelocityNet(nn.Module, ABC):
    """forward(x, sigma, cond) -> v: the module RL trains. Wraps the pipeline's transformer so
    ``torch.func.functional_call(net, params, (x, sigma, cond))`` evaluates the velocity under any
    snapshot of the trainable parameters. Subclasses build the transformer's keyword arguments."""

    def __init__(self, transformer: nn.Module, autocast_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.transformer = transformer
        self.autocast_dtype = autocast_dtype

    @abstractmethod
    def transformer_inputs(self, x: Tensor, timestep: Tensor, cond: TextCond, dtype: torch.dtype) -> dict[str, Any]:
        """Keyword arguments of the transformer call, exactly as the pipeline builds them."""

    def forward(self, x: Tensor, sigma: Tensor, cond: TextCond) -> Tensor:
        # x: [B, C, F, H, W] (normalised latents), sigma: [B] -> v: [B, C, F, H, W] float32
        timestep = sigma.float() * NUM_TRAIN_TIMESTEPS  # scheduler: timesteps = sigmas * 1000
        dtype = self.transformer.dtype  # the pipeline casts latents and embeddings to this
        kwargs = self.transformer_inputs(x.to(dtype), timestep, cond, dtype)
        ctx = (
            torch.autocast(x.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with ctx:
            out = self.transformer(**kwargs, return_dict=False)[0]
        return out.float()


# --- the adapter -------------------------------------------------------------------------------
class DiffusersVideoModel(BaseVideoModel, ABC):
    """A diffusers text-to-video pipeline behind the VideoModel protocol (models/base.py).

    Subclasses set ``net_class`` and implement ``vae_factors``, ``encode_batch`` and ``vae_decode``.
    """

    net_class: type[VelocityNet]
    negative_prompt: str = ""

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
        for name in ("text_encoder", "text_encoder_2"):
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
            from peft import LoraConfig

            transformer.requires_grad_(False)
            transformer.add_adapter(
                LoraConfig(
                    r=opts.lora_rank,
                    lora_alpha=opts.lora_alpha or opts.lora_rank,
                    target_modules=list(opts.lora_targets),
                    init_lora_weights=True,  # lora_B = 0: the adapted model starts equal to the base
                )
            )
            for p in transformer.parameters():
                if p.requires_grad:
                    p.data = p.data.float()
            if not any(p.requires_grad for p in transformer.parameters()):
                raise UserError(f"lora_targets {opts.lora_targets} match no module of {type(transformer).__name__}")
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
        for name in ("text_encoder", "text_encoder_2"):
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
        for name in ("transformer", "vae") if offloaded else ("transformer", "text_encoder", "text_encoder_2", "vae"):
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
            from peft.utils import get_peft_model_state_dict
            from safetensors.torch import save_file

            transformer.peft_config["default"].save_pretrained(str(folder))
            if gathered is not None:  # sharded: peft's key names (adapter name dropped) of the gathered tensors
                state = {n.replace(".default", ""): gathered[id(p)].float().contiguous()
                         for n, p in transformer.named_parameters() if id(p) in gathered}
            else:
                state = {k: v.detach().float().cpu().contiguous()
                         for k, v in get_peft_model_state_dict(transformer, adapter_name="default").items()}
            save_file(state, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
            return {"format": "peft-lora", "weights": "adapter_model.safetensors", "config": "adapter_config.json",
                    "lora_rank": self.options.lora_rank, "base_model": card["model"]}
        if gathered is not None:  # a sharded full fine-tune: the trainable tensors by their names in the transformer
            return save_module(transformer, folder, card, gathered)
        transformer.save_pretrained(str(folder / "transformer"), safe_serialization=True)
        return {"format": "diffusers-transformer", "weights": "transformer/", "base_model": card["model"]}

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


# --- loading ---------------------------------------------------------------------------------
PIPELINES: Registry[Any] = Registry("diffusers pipeline")
"""Pipeline class name (model_index.json ``_class_name``) -> loader(source, options)."""


def load_any(source: str, cfg: Any = None, **overrides: Any) -> DiffusersVideoModel:
    """A supported diffusers pipeline from a local folder or a hub id in the local cache, chosen by
    its model_index.json ``_class_name``; UserError naming the download when it is not present."""
    if looks_local(source) and not Path(source).expanduser().is_dir():
        raise UserError(f"config key 'model': folder {source!r} does not exist (a local diffusers pipeline "
                        "folder is expected; grpo-bench never downloads weights)")
    name = pipeline_class_name(source)
    if name is None:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "model_index.json") if source.count("/") == 1 else None
        if not isinstance(cached, str):
            raise missing_model(source, "diffusers")
        name = pipeline_class_name(str(Path(cached).parent))
    options = AdapterOptions.from_config(cfg, **overrides) if cfg is not None else AdapterOptions(**overrides)
    return PIPELINES.get(name or "?", where=f"model {source!r}: ")(source, options)


def transformer_dtype(opts: AdapterOptions) -> torch.dtype:
    """Storage dtype of the transformer: the compute dtype for a frozen LoRA base, else param_dtype."""
    if opts.lora_rank > 0:
        return torch.bfloat16 if opts.mixed_precision == "bf16" else torch.float32
    return torch.bfloat16 if opts.param_dtype == "bf16" else torch.float32


def load_dtypes(opts: AdapterOptions) -> dict[str, torch.dtype]:
    """``torch_dtype`` for ``from_pretrained`` per component: each weight is materialised once, in the
    dtype it is used in (with accelerate's low-CPU-memory loading, no float32 host copy of a bf16
    component): transformer as ``transformer_dtype``, text encoders in the compute dtype, VAE float32."""
    compute = torch.bfloat16 if opts.mixed_precision == "bf16" else torch.float32
    return {"default": compute, "transformer": transformer_dtype(opts), "vae": torch.float32}


def looks_local(source: str) -> bool:
    """A filesystem path rather than a registered name or an ``org/name`` hub id."""
    return source.startswith(("/", ".", "~")) or source.count("/") > 1 or "\\" in source


def missing_model(source: str, what: str) -> UserError:
    local = f"models/{source.rstrip('/').split('/')[-1]}"
    return UserError(
        f"model {source!r} ({what}) is not available locally and grpo-bench never downloads weights; "
        f"download it first, e.g. `hf download {source} --local-dir {local}`, then pass model={local} "
        f"(or pre-fill the Hugging Face cache at $HF_HOME)"
    )


def load_pipeline(pipeline_cls: Any, source: str, what: str, **kwargs: Any) -> Any:
    """``pipeline_cls.from_pretrained`` from a local folder or the local Hugging Face cache only.

    Never downloads and never retries: a model that is not present gives a one-line UserError
    naming what to download and where to put it.
    """
    path = Path(os.path.expanduser(source))
    local = path.exists()
    if local and not (path / "model_index.json").is_file():
        raise UserError(
            f"model folder {str(path)!r} has no model_index.json (expected a diffusers {what} pipeline folder)"
        )
    kwargs.setdefault("low_cpu_mem_usage", True)  # weights go straight into their tensors (no random init)
    try:
        return pipeline_cls.from_pretrained(str(path) if local else source, local_files_only=True, **kwargs)
    except (OSError, ValueError) as exc:
        if local:
            raise UserError(f"cannot load the {what} pipeline from {str(path)!r}: {str(exc).splitlines()[0]}") from None
        raise missing_model(source, what) from None


def pipeline_class_name(source: str) -> str | None:
    """``_class_name`` from a local pipeline folder's model_index.json (None if not local)."""
    import json

    index = Path(os.path.expanduser(source)) / "model_index.json"
    if not index.is_file():
        return None
    return json.loads(index.read_text()).get("_class_name")


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


def count_params(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def register_family(tiny_name: str, tiny: Any, hub_ids: dict[str, str], load_hub: Any, what: str) -> None:
    """Register a model family: a random tiny preset ``tiny(options, seed)`` and one entry per hub
    id, loaded by ``load_hub(hub_id, options)`` from local files only. Every factory takes a
    RunConfig ``cfg`` (frames, size, LoRA, precision, device); keywords override AdapterOptions."""
    from grpo_bench.models.registry import MODELS

    def options(cfg: Any, kw: dict[str, Any]) -> AdapterOptions:
        return AdapterOptions.from_config(cfg, **kw) if cfg is not None else AdapterOptions(**kw)

    def tiny_factory(pretrained: bool = True, cfg: Any = None, seed: int = 0, **kw: Any) -> DiffusersVideoModel:
        return tiny(options(cfg, kw), seed=seed)

    tiny_factory.__doc__ = f"Random tiny {what} (random whether or not ``pretrained``: no tiny weights exist)."
    MODELS.register(tiny_name)(tiny_factory)
    for name, hub_id in hub_ids.items():

        def hub_factory(pretrained: bool = True, cfg: Any = None, _hub: str = hub_id, **kw: Any) -> DiffusersVideoModel:
            return load_hub(_hub, options(cfg, kw))

        hub_factory.__doc__ = f"{hub_id} from the local cache or a local folder (never downloaded)."
        MODELS.register(name)(hub_factory)
