"""Measured peak memory and seconds next to ``grpo-bench plan``'s prediction (benchmarks/gpu_check.sh).

Cases (random weights built from config; nothing is downloaded):

* ``tiny``: one GRPO update of the tiny presets (tiny-wan, tiny-hunyuan15) through the trainer;
* ``stack``: a real-width HunyuanVideo 1.5 / Wan 2.1 1.3B layer stack (``--blocks`` transformer blocks)
  at the shipped suites' shapes (HunyuanVideo 1.5: 81 x 352 x 624, 20,003 tokens, hunyuan15_paper; Wan:
  33 x 480 x 832, 14,040 tokens, wan_small; ``--frames/--height/--width``), one training forward+backward
  of one row in bf16 with gradient checkpointing; predicted = weights + gradients + the plan's
  ``training_activation_bytes``; the achieved TFLOP/s (4 forward FLOPs with recompute) beside the
  plan's assumed 400;
* ``master``: the HunyuanVideo 1.5 stack with float32 master weights under bf16 autocast against bf16
  weights, at 2 and 8 blocks: the difference of the two depths separates the per-layer memory (the
  plan's CHECKPOINT_BYTES per token and hidden unit) from the recompute term (RECOMPUTE_BYTES);
* ``attention``: one HunyuanVideo 1.5 block forward+backward with 70% of its 1,256 text tokens padded,
  diffusers' dense L x L mask processor against the key-padding one (memory and seconds);
* ``vae``: the HunyuanVideo 1.5 VAE (real config, random weights) decoding latents 21 x 22 x 39 (81 x
  352 x 624, the suites' shape), float32 tiled as the adapter decodes and fp16 untiled as the official code, against the
  plan's ``vae_decode`` term and FLOP count;
* ``videoalign``: a Qwen2-VL-2B-size model (random weights) scoring one video of 6 frames at 336 x 588
  in bf16, against the plan's reward weights and activations;
* ``landing``: ``weights_changed`` of tiny-hunyuan15 full fine-tuning at lr 1e-5, bf16 parameters
  against float32 masters (the first below 0.5, the second near 1);
* ``fsdp``: a 1-process FSDP2 launch (``accelerate launch`` with the shipped fsdp2 config) of two
  tiny-hunyuan15 updates: it must finish and report its peak.

On a GPU the peak is ``torch.cuda.max_memory_allocated`` above the memory held before the step; on
the CPU it is the rise of the process's peak resident set (ru_maxrss) over its resident set before
the step. ``--dry-run`` prints the plan column only (no model is run: CPU, seconds).

    python benchmarks/gpu_check.py --device cuda --cases all   # the whole check (< 10 min on one H200)
    python benchmarks/gpu_check.py --dry-run                 # predictions only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from typing import Any

import torch

GB = 1024**3
STACKS = {  # name -> (real model spec in models/real_specs.yaml, default frames, height, width)
    "hunyuan15-stack": ("hunyuan15-480p", 81, 352, 624),  # suites/hunyuan15_paper.yaml: 20,003 tokens
    "wan13b-stack": ("wan2.1-1.3b", 33, 480, 832),  # suites/wan_small.yaml: 14,040 tokens
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default="tiny,stack",
                    help="comma list of: tiny, stack, master, attention, vae, videoalign, landing, fsdp, all, "
                         "or single cases (tiny-wan, tiny-hunyuan15, hunyuan15-stack, wan13b-stack)")
    ap.add_argument("--blocks", type=int, default=2, help="transformer blocks in each real-width stack")
    ap.add_argument("--frames", type=int, default=None, help="stack video frames (default 81)")
    ap.add_argument("--height", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--dry-run", action="store_true", help="predictions only; run nothing")
    ap.add_argument("--json", default=None, help="also write the rows as JSON")
    return ap.parse_args(argv)


# --- measuring ----------------------------------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class Peak:
    """Peak bytes above what is held at entry (GPU allocator, or the CPU resident set)."""

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


# --- the stack case --------------------------------------------------------------------------------
def stack_spec(name: str, blocks: int, frames: int | None, height: int | None,
               width: int | None) -> tuple[dict, dict, tuple]:
    """(real spec entry, transformer config with ``blocks`` layers, latent shape) of a real-width stack."""
    from grpo_bench.train.plan_models import real_specs
    from grpo_bench.train.plan_spec import latent_geometry

    real, f0, h0, w0 = STACKS[name]
    s = real_specs()[real]
    conf = {**s["transformer"]["config"], "num_layers": blocks}
    f, h, w = latent_geometry(frames or f0, height or h0, width or w0, s["vae_temporal"], s["vae_spatial"],
                              s["patch"][1])
    return s, conf, (s["latent_channels"], f, h, w)


def stack_prediction(spec: Any, params: int, checkpointing: bool = True) -> float:
    """bf16 weights + bf16 gradients of a full fine-tune + the plan's activations for one row."""
    from grpo_bench.train.plan_costs import training_activation_bytes

    return params * 2 + params * 2 + training_activation_bytes(spec, 1, checkpointing, bf16=True)


def run_stack(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    import diffusers

    from grpo_bench.train.plan_spec import transformer_spec

    s, conf, latent = stack_spec(name, args.blocks, args.frames, args.height, args.width)
    with torch.device("meta"):
        meta = getattr(diffusers, s["transformer"]["class"])(**conf)
    spec = transformer_spec(meta, latent, s["text_tokens"], s["joint_text"])
    params = spec.transformer_params
    row = {"case": f"{name} ({args.blocks} blocks)", "tokens": spec.tokens, "params": params,
           "predicted_gb": stack_prediction(spec, params) / GB, "measured_gb": None, "seconds": None,
           "flops": 4 * forward_flops(spec)}
    if args.dry_run:
        return row
    tr = getattr(diffusers, s["transformer"]["class"])(**conf).to(device=device, dtype=torch.bfloat16)
    if s["family"] == "hunyuan15":  # the trainer's attention path (no dense L x L mask)
        from grpo_bench.models.hunyuan_attention import use_key_padding_attention

        use_key_padding_attention(tr)
    tr.enable_gradient_checkpointing()
    tr.train()
    inputs = stack_inputs(s, tr, latent, device)
    with Peak(device) as peak:
        out = tr(**inputs, return_dict=False)[0]
        out.float().square().mean().backward()
    row.update(measured_gb=peak.bytes / GB, seconds=peak.seconds)
    return row


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


# --- the tiny case -------------------------------------------------------------------------------
def tiny_config(model: str, device: str) -> Any:
    from grpo_bench.train.config import RunConfig

    return RunConfig(model=model, method="flow_grpo", reward="world_oracle", updates=1, steps=4, prompts_per_update=2,
                     group_size=2, frames=5, height=16, width=16, lora_rank=2, device=device, eval_samples=1,
                     diag_every=0, save_videos=False, eval_oracle=False)


def run_tiny(model: str, args: argparse.Namespace, device: torch.device, out_dir: str) -> dict:
    from grpo_bench.train.plan import estimate

    cfg = tiny_config(model, str(device))
    p = estimate(cfg)
    predicted = p.gpu_peak if device.type == "cuda" else p.host_peak
    row = {"case": f"{model} (1 update)", "tokens": p.tokens, "params": p.params, "predicted_gb": predicted / GB,
           "measured_gb": None, "seconds": None, "predicted_seconds": p.seconds_per_update}
    if args.dry_run:
        return row
    from grpo_bench.train.config import resolve
    from grpo_bench.train.trainer import Trainer

    trainer = Trainer(resolve(cfg), out_dir, None, None)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    trainer.update(0)
    seconds = time.perf_counter() - t0
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else _maxrss()
    row.update(measured_gb=measured / GB, seconds=seconds)
    return row


# --- the cases the issue-21 recipe rests on ------------------------------------------------------
def _row(case: str, **kw: Any) -> dict:
    return {"case": case, "tokens": kw.pop("tokens", 0), "params": kw.pop("params", 0),
            "predicted_gb": kw.pop("predicted_gb", 0.0), "measured_gb": None, "seconds": None, **kw}


def _hy_stack(blocks: int, device: torch.device, dtype: torch.dtype, args: argparse.Namespace) -> tuple[Any, dict, Any]:
    import diffusers

    from grpo_bench.train.plan_spec import transformer_spec

    s, conf, latent = stack_spec("hunyuan15-stack", blocks, args.frames, args.height, args.width)
    with torch.device("meta"):
        meta = getattr(diffusers, s["transformer"]["class"])(**conf)
    spec = transformer_spec(meta, latent, s["text_tokens"], s["joint_text"])
    if args.dry_run:
        return None, {}, spec
    tr = getattr(diffusers, s["transformer"]["class"])(**conf).to(device=device, dtype=dtype)
    return tr, stack_inputs(s, tr, latent, device), spec


def run_master(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """fp32 masters + bf16 autocast vs bf16 weights, 2 and 8 blocks; per-layer and recompute memory."""
    from grpo_bench.models.hunyuan_attention import use_key_padding_attention
    from grpo_bench.train.plan_costs import CHECKPOINT_BYTES, RECOMPUTE_BYTES

    rows, peaks = [], {}
    for dtype, name in ((torch.float32, "fp32 master"), (torch.bfloat16, "bf16")):
        for blocks in (2, 8):
            tr, inputs, spec = _hy_stack(blocks, device, dtype, args)
            w = 4 if dtype == torch.float32 else 2
            row = _row(f"hunyuan15 {name} ({blocks} blocks)", tokens=spec.tokens, params=spec.transformer_params,
                       predicted_gb=(2 * w * spec.transformer_params + spec.tokens * spec.hidden
                                     * (blocks * CHECKPOINT_BYTES + RECOMPUTE_BYTES)) / GB)
            if tr is not None:
                use_key_padding_attention(tr)
                tr.enable_gradient_checkpointing()
                tr.train()
                with Peak(device) as peak, torch.autocast(device.type, dtype=torch.bfloat16):
                    tr(**inputs, return_dict=False)[0].float().square().mean().backward()
                peaks[(name, blocks)] = peak.bytes - 2 * w * spec.transformer_params  # activations only
                row.update(measured_gb=peak.bytes / GB, seconds=peak.seconds)
                del tr, inputs
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
        per_token = spec.tokens * spec.hidden
        layer = _row(f"  {name}: per layer", tokens=spec.tokens, predicted_gb=per_token * CHECKPOINT_BYTES / GB)
        recompute = _row(f"  {name}: recompute", tokens=spec.tokens, predicted_gb=per_token * RECOMPUTE_BYTES / GB)
        if (name, 8) in peaks:
            per_layer = (peaks[(name, 8)] - peaks[(name, 2)]) / 6
            layer["measured_gb"] = per_layer / GB
            recompute["measured_gb"] = (peaks[(name, 2)] - 2 * per_layer) / GB
        rows += [layer, recompute]
    return rows


def run_attention(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """One block, 70% of the text tokens padded: dense L x L mask vs the key-padding processor."""
    from grpo_bench.models.hunyuan_attention import use_key_padding_attention

    rows = []
    for kind in ("dense mask", "key padding"):
        tr, inputs, spec = _hy_stack(1, device, torch.bfloat16, args)
        L = spec.tokens
        row = _row(f"hunyuan15 attention, {kind}", tokens=L, params=spec.transformer_params,
                   predicted_gb=(L * L / GB if kind == "dense mask" else 0.0))  # the bool [1, 1, L, L] mask
        if tr is not None:
            for key in ("encoder_attention_mask", "encoder_attention_mask_2"):
                m = inputs[key]
                m[:, int(0.3 * m.shape[1]):] = 0  # 70% padding
            if kind == "key padding":
                use_key_padding_attention(tr)
            tr.train()
            with Peak(device) as peak:
                tr(**inputs, return_dict=False)[0].float().square().mean().backward()
            row.update(measured_gb=peak.bytes / GB, seconds=peak.seconds)
            del tr, inputs
        rows.append(row)
    return rows


def run_vae(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """The HunyuanVideo 1.5 VAE decoding latents 21 x 22 x 39: fp32 tiled (ours) and fp16 untiled (official)."""
    import diffusers

    from grpo_bench.train.plan_costs import VAE_DECODE_MAPS
    from grpo_bench.train.plan_models import real_specs
    from grpo_bench.train.plan_spec import parameter_count, vae_decode_profile

    s = real_specs()["hunyuan15-480p"]
    with torch.device("meta"):
        meta = getattr(diffusers, s["vae"]["class"])(**s["vae"]["config"])
    flops_per_pixel, top, tile = vae_decode_profile(meta, s["latent_channels"])
    f, h, w = 81, 352, 624
    rows = []
    for dtype, tiled, label in ((torch.float32, True, "fp32 tiled"), (torch.float16, False, "fp16 untiled")):
        th, tw = tile if tiled and tile else (h, w)
        bytes_per = 4 if dtype == torch.float32 else 2
        row = _row(f"hunyuan15 VAE decode, {label}", tokens=21 * 22 * 39, params=parameter_count(meta),
                   predicted_gb=VAE_DECODE_MAPS * top * f * min(th, h) * min(tw, w) * bytes_per / GB,
                   flops=flops_per_pixel * f * h * w)
        if not args.dry_run:
            vae = getattr(diffusers, s["vae"]["class"])(**s["vae"]["config"]).to(device=device, dtype=dtype).eval()
            if tiled:
                vae.enable_tiling()
            z = torch.randn(1, s["latent_channels"], 21, 22, 39, device=device, dtype=dtype)
            with Peak(device) as peak, torch.no_grad():
                vae.decode(z, return_dict=False)
            row.update(measured_gb=peak.bytes / GB, seconds=peak.seconds)
            del vae, z
        rows.append(row)
    return rows


def run_videoalign(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """A Qwen2-VL-2B-size model (random weights) on one video of 6 frames at 336 x 588, bf16, no grad."""
    from grpo_bench.train.plan_costs import REWARD_PARAMS, reward_cost

    act, flops = reward_cost("videoalign", 81)
    row = _row("VideoAlign (Qwen2-VL-2B size) 6 x 336 x 588", tokens=int(3 * 24 * 42 / 4 + 128),
               params=int(REWARD_PARAMS["videoalign"]),
               predicted_gb=(REWARD_PARAMS["videoalign"] * 2 + act / 2) / GB, flops=flops)  # one video
    if args.dry_run:
        return [row]
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    conf = Qwen2VLConfig(text_config=dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                          num_attention_heads=12, num_key_value_heads=2, vocab_size=151936),
                         vision_config=dict(embed_dim=1280, depth=32, num_heads=16, hidden_size=1536))
    with Peak(device) as load:
        model = Qwen2VLForConditionalGeneration(conf).to(device=device, dtype=torch.bfloat16).eval()
    grid = torch.tensor([[3, 24, 42]], device=device)  # 6 frames / 2, 336 / 14, 588 / 14
    pixels = torch.randn(3 * 24 * 42, 3 * 2 * 14 * 14, device=device, dtype=torch.bfloat16)
    n_video = 3 * 24 * 42 // 4
    ids = torch.full((1, n_video + 128), 1, device=device)
    ids[0, 64:64 + n_video] = conf.video_token_id
    with Peak(device) as peak, torch.no_grad():
        model(input_ids=ids, pixel_values_videos=pixels, video_grid_thw=grid)
    row.update(measured_gb=(load.bytes + peak.bytes) / GB, seconds=peak.seconds)
    return [row]


def run_landing(args: argparse.Namespace, device: torch.device, out_dir: str) -> list[dict]:
    """weights_changed of tiny-hunyuan15 full fine-tuning at lr 1e-5: bf16 parameters vs float32 masters."""
    rows = []
    for dtype in ("bf16", "float32"):
        row = _row(f"weights_changed tiny-hunyuan15 {dtype}", predicted_gb=0.0,
                   expected="< 0.5" if dtype == "bf16" else "> 0.99")
        if not args.dry_run:
            from accelerate.state import AcceleratorState

            from grpo_bench.train.config import RunConfig, resolve
            from grpo_bench.train.trainer import Trainer

            AcceleratorState._reset_state(reset_partial_state=True)
            cfg = RunConfig(model="tiny-hunyuan15", method="sage_grpo", reward="world_oracle", updates=1,
                            prompts_per_update=1, group_size=4, lr=1e-5, lora_rank=0, param_dtype=dtype,
                            mixed_precision="bf16", device=str(device), eval_samples=1, diag_every=0,
                            save_videos=False, eval_oracle=False)
            t0 = time.perf_counter()
            line = Trainer(resolve(cfg), os.path.join(out_dir, dtype), None, None).update(0)
            row.update(measured=line["weights_changed"], seconds=time.perf_counter() - t0)
        rows.append(row)
    return rows


def run_fsdp(args: argparse.Namespace, device: torch.device, out_dir: str) -> list[dict]:
    """A 1-process FSDP2 launch of two tiny-hunyuan15 updates through accelerate and the shipped config."""
    import subprocess

    from grpo_bench.train.distributed import config_path

    row = _row("FSDP2 1-process launch (tiny-hunyuan15)", predicted_gb=0.0)
    if args.dry_run:
        return [row]
    cmd = ["accelerate", "launch", "--config_file", str(config_path("fsdp2")), "--num_processes", "1", "-m",
           "grpo_bench.cli", "train", "--model", "tiny-hunyuan15", "--method", "sage_grpo", "--updates", "2",
           "--out", os.path.join(out_dir, "fsdp"), "reward=world_oracle", "eval_oracle=false", "lora_rank=0",
           "mixed_precision=bf16", "prompts_per_update=1", "group_size=4", "diag_every=0", "save_videos=false"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    row.update(seconds=time.perf_counter() - t0, measured=("ok" if done.returncode == 0 else
                                                          f"rc {done.returncode}: {done.stderr.strip()[-300:]}"))
    return [row]


EXTRA = {"master": run_master, "attention": run_attention, "vae": run_vae, "videoalign": run_videoalign}
"""Cases that need only the arguments and the device (``landing`` and ``fsdp`` also take a folder)."""


def main(argv: list[str] | None = None) -> list[dict]:
    import tempfile

    warnings.filterwarnings("ignore")
    args = parse_args(argv)
    device = torch.device(args.device)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("tiny-wan", "tiny-hunyuan15"):
            if "tiny" in cases or "all" in cases or model in cases:
                rows.append(run_tiny(model, args, device, os.path.join(tmp, model)))
        for name in STACKS:
            if "stack" in cases or "all" in cases or name in cases:
                rows.append(run_stack(name, args, device))
        for name, case in EXTRA.items():
            if name in cases or "all" in cases:
                rows += case(args, device)
        if "landing" in cases or "all" in cases:
            rows += run_landing(args, device, tmp)
        if "fsdp" in cases or "all" in cases:
            rows += run_fsdp(args, device, tmp)
    print(f"{'case':44} {'tokens':>7} {'params':>10} {'plan GB':>8} {'measured GB':>12} {'s':>8} {'TFLOP/s':>8}"
          "  other")
    for r in rows:
        meas = "-" if r["measured_gb"] is None else f"{r['measured_gb']:.2f}"
        secs = "-" if r["seconds"] is None else f"{r['seconds']:.2f}"
        rate = f"{r['flops'] / r['seconds'] / 1e12:.0f}" if r.get("flops") and r["seconds"] else "-"
        other = " ".join(f"{k}={r[k]}" for k in ("measured", "expected") if k in r)
        print(f"{r['case']:44} {r['tokens']:>7} {r['params']:>10} {r['predicted_gb']:>8.2f} {meas:>12} {secs:>8} "
              f"{rate:>8}  {other}")
    for r in rows:  # what `plan` needs to be corrected by: measured / predicted (memory, and time where predicted)
        r["memory_ratio"] = r["measured_gb"] / r["predicted_gb"] if r["measured_gb"] and r["predicted_gb"] else None
        pred_s = r.get("predicted_seconds")
        r["seconds_ratio"] = r["seconds"] / pred_s if r["seconds"] and pred_s else None
    print("measured / predicted (the corrections plan needs): " + "; ".join(
        f"{r['case'].strip()}: memory {r['memory_ratio']:.2f}"
        + (f", seconds {r['seconds_ratio']:.2f}" if r["seconds_ratio"] else "")
        for r in rows if r["memory_ratio"]) if any(r["memory_ratio"] for r in rows) else
          "measured / predicted: nothing measured (--dry-run)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
