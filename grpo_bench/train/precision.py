"""The compute precision of a run: ``mixed_precision: auto`` (the default) resolves per model and host.

The world's U-Net is conv-bound; on hardware with bf16 units (AVX512-BF16 or AMX on a CPU, any
bf16-capable GPU) its forwards and backwards run under bf16 autocast, about 1.5-2.5x faster on one
CPU thread, while log-probs, ratios, KL, advantages and the optimizer stay in fp32 (core/rollout.py
``transition`` and everything after it work in float32). Rollout and training share one forward path,
so the PPO ratio of a rollout's first optimizer step is still exactly 1. bf16 was made the world's
default only after tests/train/test_bf16_equivalence.py (opt-in, ``-m slow``) showed learning under bf16
within the paired noise of fp32. Real models resolve ``auto`` to fp32 compute: their suites state
their own precision. Where the hardware has no bf16 units, ``auto`` falls back to fp32 and says so
once. The precision is an execution field (not part of the cell id); what a cell ran at is recorded
in its final.json.
"""

from __future__ import annotations

import warnings

import torch

from grpo_bench.cpu_kernels import capped

_SAID: set[str] = set()


def has_bf16_units(cpu: bool) -> bool:
    """Whether bf16 matrix work runs natively here (not emulated): AVX512-BF16 / AMX, or a bf16 GPU."""
    if not cpu:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if capped():  # the portable kernels (grpo_bench/cpu_kernels.py) stop at AVX2, below the bf16 units
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def resolve(requested: str, bf16_by_default: bool, cpu: bool) -> str:
    """'no' | 'bf16' | 'fp16' for the run; ``auto`` is bf16 for a model that asks for it on bf16 hardware."""
    if requested != "auto":
        return requested
    if not bf16_by_default:
        return "no"
    if has_bf16_units(cpu):
        return "bf16"
    where = "this GPU has no bf16 support"
    if cpu:
        where = ("the CPU kernels are capped at AVX2 (cpu_kernels: avx2)" if capped()
                 else "this CPU has no bf16 units (AVX512-BF16 or AMX)")
    if where not in _SAID:
        _SAID.add(where)
        warnings.warn(f"mixed_precision auto: {where}; the world runs in fp32 (about 2x slower)", stacklevel=2)
    return "no"
