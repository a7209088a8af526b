"""Measured peak memory and seconds next to ``grpo-bench plan``'s prediction (benchmarks/gpu_check.sh).

Cases (random weights built from config; nothing is downloaded):

* ``tiny``: one GRPO update of the tiny presets (tiny-wan, tiny-hunyuan15) through the trainer;
* ``stack``: a real-width HunyuanVideo 1.5 / Wan 2.1 14B layer stack (``--blocks`` transformer blocks)
  at the token count of 480p x 81 frames (``--frames/--height/--width``), one training forward+backward
  of one row in bf16 with gradient checkpointing; predicted = weights + gradients + the plan's
  ``training_activation_bytes``.

On a GPU the peak is ``torch.cuda.max_memory_allocated`` above the memory held before the step; on
the CPU it is the rise of the process's peak resident set (ru_maxrss) over its resident set before
the step. ``--dry-run`` prints the plan column only (no model is run: CPU, seconds).

    python benchmarks/gpu_check.py --device cuda            # the whole check (< 8 min on one H200)
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
    "hunyuan15-stack": ("hunyuan15-480p", 81, 480, 848),
    "wan14b-stack": ("wan2.1-14b", 81, 480, 832),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default="tiny,stack",
                    help="comma list of: tiny, stack, or single cases "
                         "(tiny-wan, tiny-hunyuan15, hunyuan15-stack, wan14b-stack)")
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
    from grpo_bench.train import plan

    real, f0, h0, w0 = STACKS[name]
    s = plan.real_specs()[real]
    conf = {**s["transformer"]["config"], "num_layers": blocks}
    f, h, w = plan.latent_geometry(frames or f0, height or h0, width or w0, s["vae_temporal"], s["vae_spatial"],
                                   s["patch"][1])
    return s, conf, (s["latent_channels"], f, h, w)


def stack_prediction(spec: Any, params: int, checkpointing: bool = True) -> float:
    """bf16 weights + bf16 gradients of a full fine-tune + the plan's activations for one row."""
    from grpo_bench.train.plan import training_activation_bytes

    return params * 2 + params * 2 + training_activation_bytes(spec, 1, checkpointing, bf16=True)


def run_stack(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    import diffusers

    from grpo_bench.train import plan

    s, conf, latent = stack_spec(name, args.blocks, args.frames, args.height, args.width)
    with torch.device("meta"):
        meta = getattr(diffusers, s["transformer"]["class"])(**conf)
    spec = plan.transformer_spec(meta, latent, s["text_tokens"], s["joint_text"])
    params = spec.transformer_params
    row = {"case": f"{name} ({args.blocks} blocks)", "tokens": spec.tokens, "params": params,
           "predicted_gb": stack_prediction(spec, params) / GB, "measured_gb": None, "seconds": None}
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


def main(argv: list[str] | None = None) -> list[dict]:
    import tempfile

    warnings.filterwarnings("ignore")
    args = parse_args(argv)
    device = torch.device(args.device)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("tiny-wan", "tiny-hunyuan15"):
            if "tiny" in cases or model in cases:
                rows.append(run_tiny(model, args, device, os.path.join(tmp, model)))
        for name in STACKS:
            if "stack" in cases or name in cases:
                rows.append(run_stack(name, args, device))
    print(f"{'case':34} {'tokens':>7} {'params':>10} {'plan GB':>8} {'measured GB':>12} {'s':>8}")
    for r in rows:
        meas = "-" if r["measured_gb"] is None else f"{r['measured_gb']:.2f}"
        secs = "-" if r["seconds"] is None else f"{r['seconds']:.2f}"
        print(f"{r['case']:34} {r['tokens']:>7} {r['params']:>10} {r['predicted_gb']:>8.2f} {meas:>12} {secs:>8}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
