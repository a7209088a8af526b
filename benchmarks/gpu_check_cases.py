"""The cases of benchmarks/gpu_check.py: each a generator of rows (a dict per measurement next to its prediction).

Every measured row is taken on a second iteration: the first (the warm-up) pays for CUDA kernel loading,
cuBLAS/cuDNN autotuning and the allocator's first growth, which a training run pays once. Memory is the
peak above what is held when the measured iteration starts (``Peak``), so the resident weights are never
in it: every prediction here is on that basis too (gradients, autocast copies and activations; the
weights are a row field of their own where measured).
"""

from __future__ import annotations

import gc
import inspect
import os
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

GB = 1024**3
STACKS = {  # name -> (real model spec in models/real_specs.yaml, default frames, height, width)
    "hunyuan15-stack": ("hunyuan15-480p", 81, 352, 624),  # suites/hunyuan15_paper.yaml: 20,003 tokens
    "wan13b-stack": ("wan2.1-1.3b", 33, 480, 832),  # suites/wan_small.yaml: 14,040 tokens
}
QWEN2VL_2B = dict(text_config=dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                   num_attention_heads=12, num_key_value_heads=2, vocab_size=151936),
                  vision_config=dict(embed_dim=1280, depth=32, num_heads=16, hidden_size=1536))
"""Qwen2-VL-2B-Instruct's shape (VideoAlign's base model), built with random weights."""
VIDEO_TOKEN_TYPE = 2  # transformers 5 mm_token_type_ids: text 0, image 1, video 2


@dataclass
class Context:
    args: Any
    device: torch.device
    out_dir: str


# --- measuring ----------------------------------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class Peak:
    """Peak bytes above what is held at entry (GPU allocator, or the CPU resident set), and seconds."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __enter__(self) -> Peak:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device)
        else:
            self.start = _rss()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = torch.cuda.max_memory_allocated(self.device) - self.start
        else:
            self.bytes = max(0, _maxrss() - self.start)
        self.seconds = time.perf_counter() - self.t0


def measure(step: Callable[[], Any], device: torch.device, between: Callable[[], Any] | None = None) -> Peak:
    """Run ``step`` once to warm up, ``between`` (e.g. drop the warm-up's gradients), then measure a second run."""
    step()
    if between is not None:
        between()
    release(device)
    with Peak(device) as peak:
        peak.result = step()
    return peak


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def row(case: str, **kw: Any) -> dict:
    return {"case": case, "tokens": kw.pop("tokens", 0), "params": kw.pop("params", 0),
            "predicted_gb": kw.pop("predicted_gb", 0.0), "measured_gb": None, "seconds": None, **kw}


# --- real-width transformer stacks ----------------------------------------------------------------
def stack_spec(name: str, blocks: int, frames: int | None, height: int | None,
               width: int | None) -> tuple[dict, dict, tuple]:
    """(real spec entry, transformer config with ``blocks`` layers, latent shape) of a real-width stack."""
    from grpo_bench.plan.model_specs import real_specs
    from grpo_bench.plan.spec import latent_geometry

    real, f0, h0, w0 = STACKS[name]
    s = real_specs()[real]
    conf = {**s["transformer"]["config"], "num_layers": blocks}
    f, h, w = latent_geometry(frames or f0, height or h0, width or w0, s["vae_temporal"], s["vae_spatial"],
                              s["patch"][1])
    return s, conf, (s["latent_channels"], f, h, w)


def above_weights_prediction(spec: Any, params: int, weight_bytes: int, blocks_checkpointed: bool = True) -> float:
    """What a training forward+backward adds above the resident weights: gradients in the weights' dtype,
    autocast's bf16 copies of float32 weights, and the plan's activations of one row (bf16 autocast)."""
    from grpo_bench.plan.costs import autocast_copy_bytes, training_activation_bytes

    copies = autocast_copy_bytes(params, params, False, "float32" if weight_bytes == 4 else "bf16", True)
    return params * weight_bytes + copies + training_activation_bytes(spec, 1, blocks_checkpointed, bf16=True)


def layer_terms(activations: dict[int, float]) -> tuple[float, float]:
    """(per-layer bytes, the rest: recompute and temporaries) from activation peaks at two depths, the
    peaks being blocks x per-layer + rest."""
    (b1, a1), (b2, a2) = sorted(activations.items())
    per_layer = (a2 - a1) / (b2 - b1)
    return per_layer, a1 - b1 * per_layer


def forward_flops(spec: Any) -> float:
    """The plan's FLOPs of one row's forward (2 x parameters x tokens plus attention)."""
    L, hid = spec.tokens, spec.hidden
    attn = 4 * L * L * hid + (0 if spec.joint_text else 4 * spec.video_tokens * spec.text_tokens * hid)
    return 2 * spec.transformer_params * L + attn * spec.layers


def stack_inputs(s: dict, tr: Any, latent: tuple, device: torch.device) -> dict:
    c, f, h, w = latent
    bf = dict(device=device, dtype=torch.bfloat16)
    if s["family"] == "wan":
        return {"hidden_states": torch.randn(1, c, f, h, w, **bf), "timestep": torch.tensor([500.0], device=device),
                "encoder_hidden_states": torch.randn(1, s["text_tokens"], tr.config.text_dim, **bf)}
    text, text2, img = 1000, 256, 729
    return {"hidden_states": torch.randn(1, tr.config.in_channels, f, h, w, **bf),
            "image_embeds": torch.zeros(1, img, tr.config.image_embed_dim, **bf),
            "timestep": torch.tensor([500.0], **bf),
            "encoder_hidden_states": torch.randn(1, text, tr.config.text_embed_dim, **bf),
            "encoder_attention_mask": torch.ones(1, text, **bf),
            "encoder_hidden_states_2": torch.randn(1, text2, tr.config.text_embed_2_dim, **bf),
            "encoder_attention_mask_2": torch.ones(1, text2, **bf)}


def build_stack(name: str, blocks: int, ctx: Context, dtype: torch.dtype) -> tuple[Any, dict, Any, dict]:
    """(transformer or None on a dry run, its inputs, its plan spec, the real spec entry)."""
    import diffusers

    from grpo_bench.plan.spec import transformer_spec

    a = ctx.args
    s, conf, latent = stack_spec(name, blocks, a.frames, a.height, a.width)
    with torch.device("meta"):
        meta = getattr(diffusers, s["transformer"]["class"])(**conf)
    spec = transformer_spec(meta, latent, s["text_tokens"], s["joint_text"])
    if a.dry_run:
        return None, {}, spec, s
    tr = getattr(diffusers, s["transformer"]["class"])(**conf).to(device=ctx.device, dtype=dtype)
    return tr, stack_inputs(s, tr, latent, ctx.device), spec, s


def train_step(tr: Any, inputs: dict, device: torch.device) -> Callable[[], None]:
    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = tr(**inputs, return_dict=False)[0]
        out.float().square().mean().backward()
    return step


def _drop_grads(tr: Any) -> Callable[[], None]:
    return lambda: tr.zero_grad(set_to_none=True)


def run_stack(name: str, ctx: Context) -> Iterator[dict]:
    """One training forward+backward of one row, bf16 weights, gradient checkpointing, the trainer's attention."""
    tr, inputs, spec, s = build_stack(name, ctx.args.blocks, ctx, torch.bfloat16)
    params = spec.transformer_params
    r = row(f"{name} ({ctx.args.blocks} blocks)", tokens=spec.tokens, params=params,
            predicted_gb=above_weights_prediction(spec, params, 2) / GB, flops=4 * forward_flops(spec),
            predicted_weights_gb=params * 2 / GB)
    if tr is not None:
        if s["family"] == "hunyuan15":  # the trainer's attention path (no dense L x L mask)
            from grpo_bench.models.hunyuan_attention import use_key_padding_attention

            use_key_padding_attention(tr)
        tr.enable_gradient_checkpointing()
        tr.train()
        peak = measure(train_step(tr, inputs, ctx.device), ctx.device, _drop_grads(tr))
        r.update(measured_gb=peak.bytes / GB, seconds=peak.seconds,
                 weights_gb=sum(p.numel() * p.element_size() for p in tr.parameters()) / GB)
    yield r


def run_master(ctx: Context) -> Iterator[dict]:
    """Float32 masters under bf16 autocast against bf16 weights at 2 and 8 blocks: the two depths separate the
    per-layer memory (the plan's CHECKPOINT_BYTES per token and hidden unit) from the rest (RECOMPUTE_BYTES)."""
    from grpo_bench.models.hunyuan_attention import use_key_padding_attention
    from grpo_bench.plan.costs import CHECKPOINT_BYTES, RECOMPUTE_BYTES, autocast_copy_bytes

    for dtype, name in ((torch.float32, "fp32 master"), (torch.bfloat16, "bf16")):
        acts: dict[int, float] = {}
        w = 4 if dtype == torch.float32 else 2
        for blocks in (2, 8):
            tr, inputs, spec, _ = build_stack("hunyuan15-stack", blocks, ctx, dtype)
            params = spec.transformer_params
            r = row(f"hunyuan15 {name} ({blocks} blocks)", tokens=spec.tokens, params=params,
                    predicted_gb=above_weights_prediction(spec, params, w) / GB)
            if tr is not None:
                use_key_padding_attention(tr)
                tr.enable_gradient_checkpointing()
                tr.train()
                peak = measure(train_step(tr, inputs, ctx.device), ctx.device, _drop_grads(tr))
                copies = autocast_copy_bytes(params, params, False, "float32" if w == 4 else "bf16", True)
                acts[blocks] = peak.bytes - params * w - copies  # the gradients and copies are known exactly
                r.update(measured_gb=peak.bytes / GB, seconds=peak.seconds)
                del tr, inputs
                release(ctx.device)
            yield r
        per_token = spec.tokens * spec.hidden
        layer = row(f"  {name}: per layer", tokens=spec.tokens, predicted_gb=per_token * CHECKPOINT_BYTES / GB)
        rest = row(f"  {name}: recompute", tokens=spec.tokens, predicted_gb=per_token * RECOMPUTE_BYTES / GB)
        if len(acts) == 2:
            per_layer, recompute = layer_terms(acts)
            layer["measured_gb"], rest["measured_gb"] = per_layer / GB, recompute / GB
        yield layer
        yield rest


def run_attention(ctx: Context) -> Iterator[dict]:
    """One block, 70% of the text tokens padded: dense L x L mask vs the key-padding processor."""
    from grpo_bench.models.hunyuan_attention import use_key_padding_attention

    for kind in ("dense mask", "key padding"):
        tr, inputs, spec, _ = build_stack("hunyuan15-stack", 1, ctx, torch.bfloat16)
        L = spec.tokens
        r = row(f"hunyuan15 attention, {kind}", tokens=L, params=spec.transformer_params,
                predicted_gb=(L * L / GB if kind == "dense mask" else 0.0))  # the bool [1, 1, L, L] mask
        if tr is not None:
            for key in ("encoder_attention_mask", "encoder_attention_mask_2"):
                m = inputs[key]
                m[:, int(0.3 * m.shape[1]):] = 0  # 70% padding
            if kind == "key padding":
                use_key_padding_attention(tr)
            tr.train()
            peak = measure(train_step(tr, inputs, ctx.device), ctx.device, _drop_grads(tr))
            r.update(measured_gb=peak.bytes / GB, seconds=peak.seconds)
            del tr, inputs
            release(ctx.device)
        yield r


def run_vae(ctx: Context) -> Iterator[dict]:
    """The HunyuanVideo 1.5 VAE decoding latents 21 x 22 x 39: fp32 tiled (ours) and fp16 untiled (official)."""
    import diffusers

    from grpo_bench.plan.costs import VAE_DECODE_MAPS
    from grpo_bench.plan.model_specs import real_specs
    from grpo_bench.plan.spec import parameter_count, vae_decode_profile

    s = real_specs()["hunyuan15-480p"]
    with torch.device("meta"):
        meta = getattr(diffusers, s["vae"]["class"])(**s["vae"]["config"])
    flops_per_pixel, top, tile = vae_decode_profile(meta, s["latent_channels"])
    f, h, w = 81, 352, 624
    for dtype, tiled, label in ((torch.float32, True, "fp32 tiled"), (torch.float16, False, "fp16 untiled")):
        th, tw = tile if tiled and tile else (h, w)
        bytes_per = 4 if dtype == torch.float32 else 2
        r = row(f"hunyuan15 VAE decode, {label}", tokens=21 * 22 * 39, params=parameter_count(meta),
                predicted_gb=VAE_DECODE_MAPS * top * f * min(th, h) * min(tw, w) * bytes_per / GB,
                flops=flops_per_pixel * f * h * w)
        if not ctx.args.dry_run:
            vae = getattr(diffusers, s["vae"]["class"])(**s["vae"]["config"]).to(device=ctx.device, dtype=dtype).eval()
            if tiled:
                vae.enable_tiling()
            z = torch.randn(1, s["latent_channels"], 21, 22, 39, device=ctx.device, dtype=dtype)
            with torch.no_grad():
                peak = measure(lambda vae=vae, z=z: vae.decode(z, return_dict=False), ctx.device)
            r.update(measured_gb=peak.bytes / GB, seconds=peak.seconds)
            del vae, z, peak
            release(ctx.device)
        yield r


def videoalign_inputs(conf: Any, frames: int, height: int, width: int, text_tokens: int,
                      device: torch.device, dtype: torch.dtype) -> dict:
    """One video's Qwen2-VL inputs as its processor builds them, ``mm_token_type_ids`` included (transformers 5
    needs it for the multimodal rotary positions): the video's merged patch tokens inside ``text_tokens``."""
    v = conf.vision_config
    grid = (frames // v.temporal_patch_size, height // v.patch_size, width // v.patch_size)
    patches = grid[0] * grid[1] * grid[2]
    n_video = patches // v.spatial_merge_size**2
    ids = torch.full((1, n_video + text_tokens), 1, device=device, dtype=torch.long)
    start = text_tokens // 2
    ids[0, start:start + n_video] = conf.video_token_id
    types = torch.zeros_like(ids, dtype=torch.int32)
    types[0, start:start + n_video] = VIDEO_TOKEN_TYPE
    pixels = torch.randn(patches, v.in_channels * v.temporal_patch_size * v.patch_size**2, device=device, dtype=dtype)
    return {"input_ids": ids, "mm_token_type_ids": types, "pixel_values_videos": pixels,
            "video_grid_thw": torch.tensor([grid], device=device)}


def run_videoalign(ctx: Context, shape: dict | None = None) -> Iterator[dict]:
    """A Qwen2-VL-2B-size model (random weights) on one video of 6 frames at 336 x 588, bf16, no grad."""
    from grpo_bench.plan.costs import reward_cost
    from grpo_bench.rewards.videoalign import MODEL_WEIGHTS

    act, flops, _ = reward_cost("videoalign", 81)
    r = row("VideoAlign (Qwen2-VL-2B size) 6 x 336 x 588", tokens=int(3 * 24 * 42 / 4 + 128),
            params=int(MODEL_WEIGHTS.params), predicted_gb=act / 2 / GB,  # one video of the batch of 2
            predicted_weights_gb=MODEL_WEIGHTS.bytes("cuda") / GB, flops=flops)
    if ctx.args.dry_run:
        yield r
        return
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    conf = Qwen2VLConfig(**(shape or QWEN2VL_2B))
    model = Qwen2VLForConditionalGeneration(conf).to(device=ctx.device, dtype=torch.bfloat16).eval()
    inputs = videoalign_inputs(conf, 6, 336, 588, 128, ctx.device, torch.bfloat16)
    if "mm_token_type_ids" not in inspect.signature(model.forward).parameters:  # transformers 4 computes it
        inputs.pop("mm_token_type_ids")
    with torch.no_grad():
        peak = measure(lambda: model(**inputs).logits.shape, ctx.device)
    r.update(measured_gb=peak.bytes / GB, seconds=peak.seconds, tokens=int(inputs["input_ids"].shape[1]),
             weights_gb=sum(p.numel() * p.element_size() for p in model.parameters()) / GB)
    yield r
