"""Measured peak memory and seconds next to ``grpo-bench plan``'s prediction (benchmarks/gpu_check.sh).

Cases (random weights built from config; nothing is downloaded; benchmarks/gpu_check_cases.py):

* ``tiny-wan``, ``tiny-hunyuan15`` (group ``tiny``): a GRPO update of the tiny presets through the trainer;
* ``hunyuan15-stack``, ``wan13b-stack`` (group ``stack``): a real-width HunyuanVideo 1.5 / Wan 2.1 1.3B layer
  stack (``--blocks`` transformer blocks) at the shipped suites' shapes (HunyuanVideo 1.5: 81 x 352 x 624,
  20,003 tokens, hunyuan15_paper; Wan: 33 x 480 x 832, 14,040 tokens, wan_small; ``--frames/--height/
  --width``), one training forward+backward of one row in bf16 with gradient checkpointing; predicted =
  gradients + the plan's ``training_activation_bytes`` (the resident weights are measured apart: weights_gb);
  the achieved TFLOP/s (4 forward FLOPs with recompute) beside the plan's assumed 400;
* ``master``: the HunyuanVideo 1.5 stack with float32 master weights under bf16 autocast against bf16
  weights, at 2 and 8 blocks: the difference of the two depths separates the per-layer memory (the
  plan's CHECKPOINT_BYTES per token and hidden unit) from the recompute term (RECOMPUTE_BYTES);
* ``attention``: one HunyuanVideo 1.5 block forward+backward with 70% of its 1,256 text tokens padded,
  diffusers' dense L x L mask processor against the key-padding one (memory and seconds);
* ``vae``: the HunyuanVideo 1.5 VAE (real config, random weights) decoding latents 21 x 22 x 39, float32
  tiled as the adapter decodes and fp16 untiled as the official code, against the plan's ``vae_decode`` term;
* ``videoalign``: a Qwen2-VL-2B-size model (random weights) scoring one video of 6 frames at 336 x 588
  in bf16 (inputs as the processor builds them, ``mm_token_type_ids`` included), against the plan's reward
  activations (its weights measured apart);
* ``landing``: ``weights_changed`` of tiny-hunyuan15 full fine-tuning at lr 1e-5, bf16 parameters
  against float32 masters (the first below 0.5, the second near 1);
* ``fsdp``: a 1-process FSDP2 launch (``accelerate launch`` with the shipped fsdp2 config) of two
  tiny-hunyuan15 updates: it must finish.

Each case runs on its own: one that fails becomes a row with its error and the next case runs. Each row is
printed as it finishes and appended to ``--json`` (one JSON object per line, flushed), so a crash or a
timeout kill keeps every row before it. Every timed step runs once to warm up first
(benchmarks/gpu_check_cases.py ``measure``). On a GPU the peak is ``torch.cuda.max_memory_allocated`` above
the memory held before the measured step; on the CPU the rise of the process's peak resident set.
``--dry-run`` prints the plan column only (no model is run: CPU, seconds).

    python benchmarks/gpu_check.py --device cuda --cases all --json gpu_check.jsonl
    python benchmarks/gpu_check.py --dry-run                 # predictions only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check_cases import (  # noqa: E402
    GB,
    STACKS,
    Context,
    Peak,
    _maxrss,
    measure,
    release,
    row,
    run_attention,
    run_master,
    run_stack,
    run_vae,
    run_videoalign,
)

__all__ = ["Peak", "main"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default="tiny,stack",
                    help=f"comma list of cases ({', '.join(CASES)}) or groups ({', '.join(GROUPS)})")
    ap.add_argument("--blocks", type=int, default=2, help="transformer blocks in each real-width stack")
    ap.add_argument("--frames", type=int, default=None, help="stack video frames (default 81)")
    ap.add_argument("--height", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--dry-run", action="store_true", help="predictions only; run nothing")
    ap.add_argument("--json", default=None, help="append each row to this file as one JSON line when it finishes")
    return ap.parse_args(argv)


# --- cases through the trainer ---------------------------------------------------------------------
def tiny_config(model: str, device: str) -> object:
    from grpo_bench.config.run import RunConfig

    return RunConfig(model=model, method="flow_grpo", reward="world_oracle", updates=2, steps=4, prompts_per_update=2,
                     group_size=2, frames=5, height=16, width=16, lora_rank=2, device=device, eval_samples=1,
                     diag_every=0, save_videos=False, eval_oracle=False)


def run_tiny(model: str, ctx: Context) -> Iterator[dict]:
    """The second of two updates (the first warms up), against the plan's peak and seconds per update."""
    from grpo_bench.config.run import resolve, section
    from grpo_bench.plan.estimate import estimate
    from grpo_bench.plan.inputs import PlanInputs

    cfg = tiny_config(model, str(ctx.device))
    p = estimate(section(resolve(cfg), PlanInputs))
    on_gpu = ctx.device.type == "cuda"
    r = row(f"{model} (1 update)", tokens=p.tokens, params=p.params,
            predicted_gb=(p.gpu_peak if on_gpu else p.host_peak) / GB, predicted_seconds=p.seconds_per_update)
    if not ctx.args.dry_run:
        from grpo_bench.train.trainer import Trainer

        trainer = Trainer(resolve(cfg), os.path.join(ctx.out_dir, model), None, None)
        updates, lines = iter(range(2)), []
        peak = measure(lambda: lines.append(trainer.update(next(updates))), ctx.device)
        # the plan's peak is the whole process's (GPU allocator, or resident set), not a rise
        whole = torch.cuda.max_memory_allocated(ctx.device) if on_gpu else _maxrss()
        # train-inference consistency at the run's precision: mean |log p_train - log p_rollout| at the rollout's
        # parameters (0 in float32 on a CPU; bf16 kernels and batch shapes move it; VeRL-Omni reports ~2e-5)
        gap = lines[-1].get("logp_gap") if lines else None
        r.update(measured_gb=whole / GB, seconds=peak.seconds, logp_gap=gap)
    yield r


def run_landing(ctx: Context) -> Iterator[dict]:
    """weights_changed of tiny-hunyuan15 full fine-tuning at lr 1e-5: bf16 parameters vs float32 masters."""
    for dtype in ("bf16", "float32"):
        r = row(f"weights_changed tiny-hunyuan15 {dtype}", expected="< 0.5" if dtype == "bf16" else "> 0.99")
        if not ctx.args.dry_run:
            from accelerate.state import AcceleratorState

            from grpo_bench.config.run import RunConfig, resolve
            from grpo_bench.train.trainer import Trainer

            AcceleratorState._reset_state(reset_partial_state=True)
            cfg = RunConfig(model="tiny-hunyuan15", method="sage_grpo", reward="world_oracle", updates=1,
                            prompts_per_update=1, group_size=4, lr=1e-5, lora_rank=0, param_dtype=dtype,
                            mixed_precision="bf16", device=str(ctx.device), eval_samples=1, diag_every=0,
                            save_videos=False, eval_oracle=False)
            t0 = time.perf_counter()
            line = Trainer(resolve(cfg), os.path.join(ctx.out_dir, dtype), None, None).update(0)
            r.update(measured=line["weights_changed"], seconds=time.perf_counter() - t0)
        yield r


def run_fsdp(ctx: Context) -> Iterator[dict]:
    """A 1-process FSDP2 launch of two tiny-hunyuan15 updates through accelerate and the shipped config."""
    from grpo_bench.config.accelerate_configs import config_path

    r = row("FSDP2 1-process launch (tiny-hunyuan15)")
    if not ctx.args.dry_run:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_path("fsdp2")),
               "--num_processes", "1", "-m", "grpo_bench.cli", "train", "--model", "tiny-hunyuan15", "--method",
               "sage_grpo", "--updates", "2", "--out", os.path.join(ctx.out_dir, "fsdp"), "reward=world_oracle",
               "eval_oracle=false", "lora_rank=0", "mixed_precision=bf16", "prompts_per_update=1", "group_size=4",
               "diag_every=0", "save_videos=false"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
        r.update(seconds=time.perf_counter() - t0, measured=("ok" if done.returncode == 0 else
                                                            f"rc {done.returncode}: {done.stderr.strip()[-300:]}"))
    yield r


CASES: dict[str, Callable[[Context], Iterator[dict]]] = {
    "tiny-wan": partial(run_tiny, "tiny-wan"), "tiny-hunyuan15": partial(run_tiny, "tiny-hunyuan15"),
    **{name: partial(run_stack, name) for name in STACKS},
    "master": run_master, "attention": run_attention, "vae": run_vae, "videoalign": run_videoalign,
    "landing": run_landing, "fsdp": run_fsdp,
}
"""Every case, in the order the check runs them (the cheap and the trainer's first)."""
GROUPS = {"tiny": ["tiny-wan", "tiny-hunyuan15"], "stack": list(STACKS), "all": list(CASES)}


def selected(spec: str) -> list[str]:
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part not in CASES and part not in GROUPS:
            raise SystemExit(f"gpu_check: --cases: unknown case {part!r}; choose from "
                             f"{', '.join([*CASES, *GROUPS])}")
        names += [n for n in GROUPS.get(part, [part]) if n not in names]
    return [n for n in CASES if n in names]


# --- rows as they finish ---------------------------------------------------------------------------
HEADER = (f"{'case':44} {'tokens':>7} {'params':>10} {'plan GB':>8} {'measured GB':>12} {'s':>8} {'TFLOP/s':>8}"
          "  other")


def with_ratios(r: dict) -> dict:
    """measured / predicted: the corrections plan needs (memory, and seconds where predicted)."""
    r["memory_ratio"] = r["measured_gb"] / r["predicted_gb"] if r["measured_gb"] and r["predicted_gb"] else None
    pred_s = r.get("predicted_seconds")
    r["seconds_ratio"] = r["seconds"] / pred_s if r["seconds"] and pred_s else None
    return r


def line(r: dict) -> str:
    meas = "-" if r["measured_gb"] is None else f"{r['measured_gb']:.2f}"
    secs = "-" if r["seconds"] is None else f"{r['seconds']:.2f}"
    rate = f"{r['flops'] / r['seconds'] / 1e12:.0f}" if r.get("flops") and r["seconds"] else "-"
    other = " ".join(f"{k}={r[k]:.3g}" if isinstance(r[k], float) else f"{k}={r[k]}"
                     for k in ("memory_ratio", "seconds_ratio", "weights_gb", "predicted_weights_gb", "measured",
                               "expected", "error") if r.get(k) is not None)
    return (f"{r['case']:44} {r['tokens']:>7} {r['params']:>10} {r['predicted_gb']:>8.2f} {meas:>12} {secs:>8} "
            f"{rate:>8}  {other}")


def emit(r: dict, json_path: str | None) -> None:
    print(line(r), flush=True)
    if json_path:
        with open(json_path, "a") as f:
            f.write(json.dumps(r, default=str) + "\n")
            f.flush()
            if not json_path.startswith("/dev/"):
                os.fsync(f.fileno())


def run_case(name: str, ctx: Context) -> Iterator[dict]:
    """The case's rows; an exception ends the case with one row naming it (the next case still runs)."""
    try:
        yield from CASES[name](ctx)
    except Exception as exc:  # any failure of one case is that case's finding, not the check's end
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        yield row(f"{name} FAILED", error=detail[:500])
    finally:
        release(ctx.device)


def main(argv: list[str] | None = None) -> list[dict]:
    warnings.filterwarnings("ignore")
    args = parse_args(argv)
    names = selected(args.cases)
    rows = []
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Context(args, torch.device(args.device), tmp)
        for name in names:
            for r in run_case(name, ctx):
                emit(with_ratios(r), args.json)
                rows.append(r)
    failed = [r["case"] for r in rows if r.get("error")]
    print(f"{len(rows)} rows, {len(failed)} failed case(s)" + (f": {', '.join(failed)}" if failed else ""))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
