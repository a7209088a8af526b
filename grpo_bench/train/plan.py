"""``grpo-bench plan``: before anything runs, what one cell needs per process.

From a resolved RunConfig and the model's architecture alone (no weights: real checkpoints are
built from the configs in ``models/real_specs.yaml`` on PyTorch's ``meta`` device, tiny presets from
their random pipelines), the plan predicts per process:

* weights, gradients, AdamW state and KL anchors (bytes per parameter from the precision; divided
  by the processes where the launch shards them: ``fsdp2`` shards all four plus one gathered block,
  ``deepspeed_zero2`` gradients and optimizer state);
* activations of the largest forward: a training micro-batch (``micro_batch`` rows, doubled by
  classifier-free guidance) with or without gradient checkpointing, or a no-grad rollout forward;
  ``ACT_BYTES`` per token and hidden unit per layer (measured on a Wan block stack; Megatron's
  34 s·h bytes per 16-bit layer plus the blocks' modulation; float32 doubles it), with no L x L
  attention term (fused / memory-efficient attention kernels);
* the rollout store (x, x', mu and one mu_ref per anchor at every stored step), decoded videos,
  the VAE and reward weights, and the text encoders while prompts are cached (offloaded after);
* host memory: the interpreter baseline, the pipeline materialised once in its load dtypes, the
  offloaded text encoders and the prompt cache (on a CPU run, also everything above);
* seconds per update from the forward FLOPs (2 x parameters x tokens plus attention) of the
  rollout, anchors, training (3x, 4x with checkpointing), and the diagnostic and evaluation
  amortised over their intervals, at a declared throughput (``tflops``).

These are estimates; ``tests/test_plan.py`` compares the activation and weight terms with measured
peaks of small models on the CPU, and ``benchmarks/gpu_check.sh`` prints the GPU measurement next to
the prediction.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from grpo_bench.errors import UserError

GB = 1024**3
ACT_BYTES = 52
"""Training activation bytes per (token x hidden unit) of one layer in 16-bit (float32: twice).
Megatron's estimate for a plain transformer layer with a fused attention kernel is 34; the adaLN
modulation and cross-attention of these video DiT blocks add to it: 52 is what a 4-layer Wan block
stack keeps (measured on the CPU in float32, halved; tests/test_plan.py)."""
RECOMPUTE_BYTES = 64
"""With gradient checkpointing: the one block recomputed in the backward pass plus the backward's
temporaries, per (token x hidden unit), 16-bit (measured as ACT_BYTES)."""
ROLLOUT_BYTES = 12
"""No-grad forward: live bytes per (token x hidden unit) of the one running layer (16-bit)."""
CHECKPOINT_BYTES = 2
"""Gradient checkpointing keeps each layer's input: bytes per (token x hidden unit), 16-bit."""
HOST_BASELINE_GB = {"cpu": 0.5, "cuda": 2.5}
"""Resident memory of one process with Python, torch, diffusers, transformers and accelerate loaded:
0.5 GB measured on the CPU (the tiny presets peak at 0.47-0.49 GB, tests/test_plan.py); with CUDA the
runtime, cuBLAS/cuDNN and kernel images add more (2.5 GB assumed, not measured in this repository)."""
GPU_OVERHEAD_GB = 1.0
"""CUDA context and kernels, per process."""
FRAGMENTATION = 1.1
"""Allocator slack on the predicted GPU peak."""
REWARD_PARAMS = {"videoalign": 2.21e9, "videoalign_16fps": 2.21e9, "clip_score": 4.28e8, "pickscore": 9.86e8}
"""Parameters of the real reward models (Qwen2-VL-2B + head, CLIP ViT-L/14, CLIP ViT-H/14); the
world's rewards are negligible."""
SPECS = Path(__file__).resolve().parents[1] / "models" / "real_specs.yaml"
VAE_DECODE_MAPS = 4
"""Float32 feature maps of the VAE decoder's highest-resolution stage alive at once (a conv's input and
output, a norm's and an upsampler's temporaries), per decoded voxel of a tile and channel: assumed,
not measured here (benchmarks/gpu_check.sh's vae case measures it)."""
VAE_THROUGHPUT = 0.25
"""The VAE decodes in float32 (TF32 convolutions at best): its FLOPs run at this share of the declared
bf16 throughput (assumed)."""
REWARD_SHAPES = {  # vision tower (params, hidden), language model (params, hidden), frames' pixels, source fps
    "videoalign": (6.7e8, 1280, 1.54e9, 1536, 336 * 588, 24.0),
    "videoalign_16fps": (6.7e8, 1280, 1.54e9, 1536, 336 * 588, 16.0),
    "clip_score": (3.0e8, 1024, 1.2e8, 768, 224 * 224, 0.0),
    "pickscore": (6.3e8, 1280, 3.5e8, 1024, 224 * 224, 0.0),
}
"""What the reward forward costs: VideoAlign (Qwen2-VL-2B) sees round_2(F / source_fps * 2) frames (at
least 4) of up to 336 x 588 pixels as 14 x 14 x 2 patches, merged 2 x 2 into language tokens; the
CLIP family sees 8 frames of 224 x 224 as 14 x 14 patches, one image per frame."""
LINK_GB_S = 300.0
"""Collective bandwidth per GPU inside one node (NVLink, GB/s achieved): communication time is the
bytes a process sends and receives at this rate, not overlapped with compute (an upper bound)."""


@dataclass
class ModelSpec:
    """What the plan needs of a generator."""

    name: str
    transformer_params: int
    text_encoder_params: int
    vae_params: int
    hidden: int
    layers: int
    latent: tuple[int, int, int, int]  # (C, F, H, W) of one latent video
    patch: tuple[int, int, int]
    text_tokens: int
    joint_text: bool
    lora_params: int = 0
    block_params: int = 0
    video: tuple[int, int, int] = (1, 1, 1)  # decoded (F, H, W)
    vae_flops_per_pixel: float = 0.0  # decoder FLOPs per decoded (frame x pixel)
    vae_channels: int = 0  # channels of the decoder's highest-resolution stage
    vae_tile: tuple[int, int] | None = None  # decoded (H, W) of one spatial tile, when the VAE tiles

    @property
    def video_tokens(self) -> int:
        _, f, h, w = self.latent
        return max(1, f // self.patch[0]) * max(1, h // self.patch[1]) * max(1, w // self.patch[2])

    @property
    def tokens(self) -> int:
        """Self-attention sequence length of one video."""
        return self.video_tokens + (self.text_tokens if self.joint_text else 0)


@dataclass
class Plan:
    """Predicted per-process needs of one cell (bytes, seconds)."""

    model: str
    params: int
    trainable: int
    tokens: int
    gpu: dict[str, float]
    host: dict[str, float]
    seconds_per_update: float
    processes: int
    sharding: str
    updates: int = 0
    seconds: dict[str, float] | None = None
    """seconds_per_update by term: transformer, vae, reward, communication."""

    @property
    def seconds_per_cell(self) -> float:
        """The whole cell: its updates (evaluation and diagnostics amortised into each)."""
        return self.seconds_per_update * self.updates

    @property
    def gpu_peak(self) -> float:
        return self.gpu["peak"]

    @property
    def host_peak(self) -> float:
        return self.host["peak"]


# --- model specs -------------------------------------------------------------------------------
def _lora_and_block(transformer: torch.nn.Module, rank: int, targets: list[str]) -> tuple[int, int]:
    lora = 0
    if rank > 0:
        for name, mod in transformer.named_modules():
            if isinstance(mod, torch.nn.Linear) and any(name == t or name.endswith("." + t) for t in targets):
                lora += rank * (mod.in_features + mod.out_features)
    units = tuple(getattr(transformer, "_no_split_modules", None) or ())
    blocks = [m for m in transformer.modules() if type(m).__name__ in units]
    block = max((sum(p.numel() for p in b.parameters()) for b in blocks), default=0)
    return lora, block


def _numel(module: torch.nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def latent_geometry(frames: int, height: int, width: int, t: int, s: int, patch: int) -> tuple[int, int, int]:
    """Latent (F, H, W) as the adapters round them (models/diffusers_video.py ``_latent_shape``)."""
    frames = max(1, round((frames - 1) / t)) * t + 1
    h, w = (max(1, round(v / (s * patch))) * s * patch for v in (height, width))
    return (frames - 1) // t + 1, h // s, w // s


def real_specs() -> dict[str, Any]:
    return yaml.safe_load(SPECS.read_text())


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
            text += _numel(getattr(transformers, enc["class"])(conf))
    lora, block = _lora_and_block(tr, rank, list(targets))
    return _numel(tr), text, _numel(vae), lora, block


def vae_decode_profile(vae: torch.nn.Module, channels: int) -> tuple[float, int, tuple[int, int] | None]:
    """(decoder FLOPs per decoded frame x pixel, highest-resolution channels, decoded tile (H, W)) of a
    VAE: the FLOPs counted by torch's FlopCounterMode on one small latent (untiled; the decoder is
    convolutional, so they scale with the decoded volume), on the module's own device (``meta`` for the
    named checkpoints)."""
    from torch.utils.flop_counter import FlopCounterMode

    device = next(vae.parameters()).device
    dtype = next(vae.parameters()).dtype
    z = torch.zeros(1, channels, 2, 4, 4, device=device, dtype=dtype)
    tiling = getattr(vae, "use_tiling", False)
    vae.use_tiling = False
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            out = vae._decode(z)
            out = out[0] if isinstance(out, tuple) else getattr(out, "sample", out)
    except Exception:  # a VAE this profile cannot drive: no decode term
        return 0.0, 0, None
    finally:
        vae.use_tiling = tiling
    per_pixel = counter.get_total_flops() / math.prod(out.shape[2:])
    conf = vae.config
    top = (conf.get("block_out_channels") or [conf.get("decoder_base_dim") or conf.get("base_dim") or 0])[0]
    th, tw = (getattr(vae, "tile_sample_min_height", None), getattr(vae, "tile_sample_min_width", None))
    return float(per_pixel), int(top), (int(th), int(tw)) if th and tw else None


@functools.lru_cache(maxsize=16)
def _meta_vae(name: str) -> tuple[float, int, tuple[int, int] | None]:
    import diffusers

    spec = real_specs()[name]
    with torch.device("meta"):
        vae = getattr(diffusers, spec["vae"]["class"])(**spec["vae"]["config"])
    return vae_decode_profile(vae, spec["latent_channels"])


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


def model_spec(cfg: Any) -> ModelSpec:
    """The spec of ``cfg.model`` at the config's frames and size (no weights are read)."""
    specs = real_specs()
    targets = tuple(cfg.lora_targets)
    name = cfg.model if cfg.model in specs else identify_folder(cfg.model)
    if name is not None:
        s = specs[name]
        tr, text, vae, lora, block = _meta_counts(name, cfg.lora_rank, targets)
        f, h, w = latent_geometry(cfg.frames, cfg.height, cfg.width, s["vae_temporal"], s["vae_spatial"], s["patch"][1])
        video = ((f - 1) * s["vae_temporal"] + 1, h * s["vae_spatial"], w * s["vae_spatial"])
        flops, top, tile = _meta_vae(name)
        return ModelSpec(name, tr, text, vae, s["hidden"], s["layers"], (s["latent_channels"], f, h, w),
                         tuple(s["patch"]), s["text_tokens"], s["joint_text"], lora, block, video, flops, top, tile)
    return _built_spec(cfg)


def _built_spec(cfg: Any) -> ModelSpec:
    """A spec read off an instantiated model (the tiny presets; any model the registry builds)."""
    from grpo_bench import models

    if cfg.model not in models.names():
        raise UserError(f"plan: model {cfg.model!r} has no architecture spec (known: "
                        f"{', '.join(sorted(real_specs()))}, or a registered preset); a local folder is planned "
                        "as the named model it holds")
    model = models.build(cfg.model, cfg=dataclasses.replace(cfg, lora_rank=0), pretrained=False) \
        if hasattr(cfg, "lora_rank") else models.build(cfg.model, pretrained=False)
    pipe = getattr(model, "pipe", None)
    net = model.trainable_module()
    tr = getattr(net, "transformer", net)
    lora, block = _lora_and_block(tr, cfg.lora_rank, list(cfg.lora_targets))
    c, f, h, w = model.latent_shape
    if pipe is None:  # the embedded world: a UNet on pixels, one "token" per latent position
        return ModelSpec(cfg.model, _numel(net), 0, 0, hidden=max(c, 1), layers=1, latent=(c, f, h, w), patch=(1, 1, 1),
                         text_tokens=0, joint_text=False, block_params=block, video=(f, h, w))
    conf = tr.config
    heads = conf.num_attention_heads * conf.attention_head_dim
    patch = (conf.patch_size if isinstance(conf.patch_size, (list, tuple))
             else (conf.get("patch_size_t", 1), conf.patch_size, conf.patch_size))
    joint = type(model).__name__.startswith("Hunyuan")
    cond = model.encode_prompts([""])
    text = sum(v.shape[1] for k, v in cond.items() if k.endswith("mask")) \
        + (pipe.vision_num_semantic_tokens if joint else 0) if joint else cond["prompt_embeds"].shape[1]
    text_params = _numel(getattr(pipe, "text_encoder", None)) + _numel(getattr(pipe, "text_encoder_2", None))
    o = model.options
    flops, top, tile = vae_decode_profile(pipe.vae, c)
    return ModelSpec(cfg.model, _numel(tr), text_params, _numel(pipe.vae), heads, conf.num_layers, (c, f, h, w),
                     tuple(patch), text, joint, lora, block, (o.frames, o.height, o.width), flops, top, tile)


# --- the estimate ----------------------------------------------------------------------------
def _bytes(dtype: str) -> int:
    return 2 if dtype == "bf16" else 4


def training_activation_bytes(spec: ModelSpec, rows: int, checkpointing: bool, bf16: bool) -> float:
    """Activations a forward keeps for its backward: rows x tokens x hidden x bytes per layer (every
    layer's ACT_BYTES, or with checkpointing each layer's input plus one recomputed layer)."""
    per = (spec.layers * CHECKPOINT_BYTES + RECOMPUTE_BYTES) if checkpointing else spec.layers * ACT_BYTES
    return rows * spec.tokens * spec.hidden * per * (1 if bf16 else 2)


def transformer_spec(transformer: torch.nn.Module, latent: tuple[int, int, int, int], text_tokens: int,
                     joint_text: bool) -> ModelSpec:
    """The spec of a built transformer (a layer stack in gpu_check, a measured model in tests)."""
    conf = transformer.config
    patch = (conf.patch_size if isinstance(conf.patch_size, (list, tuple))
             else (conf.get("patch_size_t", 1), conf.patch_size, conf.patch_size))
    _, block = _lora_and_block(transformer, 0, [])
    return ModelSpec(type(transformer).__name__, _numel(transformer), 0, 0,
                     conf.num_attention_heads * conf.attention_head_dim, conf.num_layers, latent, tuple(patch),
                     text_tokens, joint_text, 0, block)


def estimate(cfg: Any, processes: int = 1, sharding: str = "none", tflops: float = 400.0,
             spec: ModelSpec | None = None) -> Plan:
    """The plan of one resolved RunConfig on ``processes`` processes (one GPU each)."""
    from grpo_bench.core import schedule
    from grpo_bench.core.method import make_method
    from grpo_bench.core.trust_region import make_kl
    from grpo_bench.train.config import resolve
    from grpo_bench.train.prompts import load_prompt_set

    cfg = resolve(cfg)
    spec = spec or model_spec(cfg)
    bf16 = cfg.mixed_precision == "bf16"
    compute = 2 if bf16 else 4
    lora = cfg.lora_rank > 0
    param_dtype = getattr(cfg, "param_dtype", "float32")
    base_bytes = (compute if lora else _bytes(param_dtype))
    trainable = spec.lora_params if lora else spec.transformer_params
    train_bytes = 4 if lora else _bytes(param_dtype)
    world = max(1, processes)
    shard_all = world if sharding == "fsdp2" else 1
    shard_opt = world if sharding in ("fsdp2", "deepspeed_zero2") else 1

    method = make_method(cfg.method, **cfg.method_overrides())
    sigmas = schedule.sigmas(cfg.steps, cfg.shift)
    stored = int(method.eligible_steps(sigmas).sum())
    trained = int(method.train_steps(sigmas, 1, torch.Generator().manual_seed(0)).shape[1])
    anchors = len(make_kl(cfg).anchors)
    rows = cfg.prompts_per_update * cfg.group_size // world  # this process's rollouts
    cfg_mult = 2 if cfg.guidance != 1.0 else 1
    micro = min(cfg.micro_batch or rows, rows)
    L, hid, layers = spec.tokens, spec.hidden, spec.layers

    gpu: dict[str, float] = {}
    gpu["weights"] = (spec.transformer_params * base_bytes / shard_all
                      + (spec.block_params * base_bytes if shard_all > 1 else 0))
    if lora:
        gpu["weights"] += trainable * 4 / shard_all
    gpu["gradients"] = trainable * train_bytes / shard_opt
    gpu["optimizer"] = (2 * trainable * train_bytes / shard_opt
                        + (trainable * 4 / world if sharding == "deepspeed_zero2" else 0))
    gpu["anchors"] = anchors * trainable * train_bytes / shard_all
    gpu["vae"] = spec.vae_params * 4
    gpu["reward"] = REWARD_PARAMS.get(cfg.reward, 0.0) * 2
    latent = math.prod(spec.latent)
    video = 3 * math.prod(spec.video)
    gpu["rollout_store"] = rows * stored * (3 + anchors) * latent * 4 + rows * video * 4
    train_act = training_activation_bytes(spec, micro * cfg_mult, cfg.gradient_checkpointing, bf16)
    rollout_act = min(micro * cfg_mult, rows * cfg_mult) * L * hid * ROLLOUT_BYTES * (1 if bf16 else 2)
    gpu["activations"] = max(train_act, rollout_act)
    # the micro-batched diagnostic sums autograd.grad results in a second gradient buffer
    gpu["diagnostic_grads"] = trainable * train_bytes / shard_all if cfg.diag_every else 0.0
    # collective buffers: FSDP2 gathers the next block while one runs and reduce-scatters a block's
    # float32 gradients; the replicated launch averages all gradients in one float32 flat buffer
    if sharding == "fsdp2" and world > 1:
        gpu["comm_buffers"] = spec.block_params * (base_bytes + 4)
    elif world > 1:
        gpu["comm_buffers"] = trainable * 4 if sharding == "none" else 0.0
    # the reward phase (no training activations alive): one video decoded per VAE call, tiled in
    # space, then the reward model's forward over a batch
    f_out, h_out, w_out = spec.video
    tile = spec.vae_tile or (h_out, w_out)
    gpu["vae_decode"] = VAE_DECODE_MAPS * spec.vae_channels * f_out * min(tile[0], h_out) * min(tile[1], w_out) * 4
    reward_act, reward_flops = reward_cost(cfg.reward, f_out)
    gpu["reward_activations"] = reward_act
    encoders = spec.text_encoder_params * compute
    gpu["text_encoders_while_caching"] = encoders
    phase_only = ("text_encoders_while_caching", "vae_decode", "reward_activations", "activations")
    static = sum(v for k, v in gpu.items() if k not in phase_only)
    train_phase = max(static + gpu["activations"], static + gpu["vae_decode"], static + gpu["reward_activations"])
    # at load the whole transformer reaches the GPU before it is sharded, with the text encoders
    cache_phase = spec.transformer_params * base_bytes + gpu["vae"] + encoders
    on_cpu = str(getattr(cfg, "device", "auto")) == "cpu"
    gpu["peak"] = 0.0 if on_cpu else (max(train_phase, cache_phase) * FRAGMENTATION + GPU_OVERHEAD_GB * GB)

    prompts = load_prompt_set(cfg.prompts)
    n_prompts = len(set(prompts.train) | set(prompts.eval)) + 1
    text_dim = 4096 if spec.text_tokens >= 512 else hid
    host: dict[str, float] = {"baseline": HOST_BASELINE_GB["cpu" if on_cpu else "cuda"] * GB}
    host["load"] = spec.transformer_params * base_bytes + encoders + spec.vae_params * 4
    host["offloaded_text_encoders"] = encoders
    host["prompt_cache"] = n_prompts * spec.text_tokens * text_dim * compute
    host["reward_load"] = REWARD_PARAMS.get(cfg.reward, 0.0) * 2
    host["peak"] = host["baseline"] + max(host["load"], encoders + host["reward_load"]) + host["prompt_cache"]
    if on_cpu:
        host["peak"] = host["baseline"] + max(train_phase, cache_phase) + host["prompt_cache"]

    attn = 4 * L * L * hid + (0 if spec.joint_text else 4 * spec.video_tokens * spec.text_tokens * hid)  # QK^T and AV
    fwd = 2 * spec.transformer_params * L + attn * layers  # FLOPs of one row's forward
    flops = rows * cfg_mult * fwd * (cfg.steps + trained * anchors)  # sampling, then each anchor's mu_ref
    flops += rows * trained * cfg_mult * fwd * (4 if cfg.gradient_checkpointing else 3) * cfg.inner_epochs
    if cfg.diag_every:
        flops += rows * stored * cfg_mult * fwd * 3 / cfg.diag_every
    eval_rows = math.ceil(len(prompts.eval) / world) * cfg.eval_samples
    flops += eval_rows * cfg.steps * cfg_mult * fwd / cfg.eval_every
    videos = rows + eval_rows / cfg.eval_every  # decoded and scored per update
    seconds = {
        "transformer": flops / (tflops * 1e12),
        "vae": videos * spec.vae_flops_per_pixel * math.prod(spec.video) / (tflops * 1e12 * VAE_THROUGHPUT),
        "reward": videos * reward_flops / (tflops * 1e12),
        "communication": communication_bytes(cfg, spec, trainable, base_bytes, rows, trained, anchors, world,
                                             sharding) / (LINK_GB_S * 1e9),
    }
    return Plan(spec.name, spec.transformer_params, trainable, L, gpu, host, sum(seconds.values()), world, sharding,
                updates=cfg.updates, seconds=seconds)


def reward_cost(reward: str, frames: int) -> tuple[float, float]:
    """(activation bytes of one reward batch, FLOPs per video) of a real reward's no-grad forward
    (REWARD_SHAPES); 0 for the world's rewards."""
    shape = REWARD_SHAPES.get(reward)
    if shape is None:
        return 0.0, 0.0
    vision_params, vision_hidden, lm_params, lm_hidden, pixels, fps = shape
    if fps:  # VideoAlign: round_2(F / fps * 2) frames, 2-frame temporal patches, 2 x 2 merged tokens
        n = max(4, 2 * round(frames / fps))
        patches = n // 2 * pixels / 14**2
        tokens, batch = patches / 4 + 128, 2
    else:  # CLIP family: 8 frames, one image each
        n = min(8, frames)
        patches, tokens, batch = n * pixels / 14**2, n * 77, 4
    act = batch * (patches * vision_hidden + tokens * lm_hidden) * ROLLOUT_BYTES
    return act, 2 * (vision_params * patches + lm_params * tokens)


def communication_bytes(cfg: Any, spec: ModelSpec, trainable: int, base_bytes: int, rows: int, trained: int,
                        anchors: int, world: int, sharding: str) -> float:
    """Bytes one process moves through collectives per update. FSDP2: every transformer call all-gathers
    the weights (forward; backward once more) and every backward reduce-scatters float32 gradients;
    replicated and ZeRO-2: one float32 all-reduce (or reduce-scatter + all-gather, the same volume)
    of the trainable gradients per optimizer step. Ring collectives: a share (world - 1) / world of
    each buffer, twice for an all-reduce."""
    if world <= 1:
        return 0.0
    share = (world - 1) / world
    per_call = max(1, (cfg.micro_batch or rows) // (2 if cfg.guidance != 1.0 else 1))  # samples per call
    calls = math.ceil(rows / per_call)
    backward = trained * calls * cfg.inner_epochs
    if sharding == "fsdp2":
        forward = calls * (cfg.steps + trained * anchors) + backward
        gathered = spec.transformer_params * base_bytes + (trainable * 4 if cfg.lora_rank > 0 else 0)
        return share * ((forward + backward) * gathered + backward * trainable * 4)
    micro = getattr(cfg, "step_every", "minibatch") == "micro_step"
    steps = (trained * calls if micro else cfg.minibatches) * cfg.inner_epochs
    return share * 2 * trainable * 4 * steps


def check_fits(plan: Plan, gpu_memory_gb: float | None, where: str) -> None:
    """UserError (one line) when the predicted GPU peak exceeds the declared memory per device."""
    if gpu_memory_gb and plan.gpu_peak > gpu_memory_gb * GB:
        raise UserError(
            f"{where}predicted peak GPU memory {plan.gpu_peak / GB:.1f} GB per process exceeds gpu_memory_gb="
            f"{gpu_memory_gb:g} ({plan.model}, {plan.processes} process(es), sharding {plan.sharding}); lower "
            "micro_batch, turn on gradient_checkpointing, use lora_rank > 0, or shard with fsdp2 on more GPUs")
