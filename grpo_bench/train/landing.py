"""Whether an update's optimizer steps change the weights at all (docs/real_models.md, "Updates that land").

A weight stored in bf16 has 8 significant bits: a value w in [2^e, 2^(e+1)) moves only by a step of
more than half its spacing 2^(e-7), i.e. 2^(e-8) (``movable``). AdamW's first steps move each weight by
about lr (|m / sqrt(v)| ~ 1), so a bf16 weight changes only where 2^e < 2^8 * lr: at lr 1e-5, about
|w| < 2.6e-3, a small share of weights drawn from N(0, 0.02). The rest round back to themselves, step
after step, and the run trains a fraction of the model without a word. float32 master weights (bf16
compute under autocast) do not have the problem: float32 spacing is 2^-23 |w|.

Two checks:

* ``precision_warning``: before the first step, from the trainable parameters' dtypes and magnitudes
  (no step taken): the share of low-precision weights a step of ``lr`` can move, and a one-line warning
  when it is below ``WEIGHTS_CHANGED_WARN``;
* ``WeightProbe``: measured per update, the fraction of the trainable elements the update's gradients
  reached whose value differs after its optimizer steps (``weights_changed`` in metrics.jsonl, drawn in
  the report's liveness table); a one-line warning the first time it falls below
  ``WEIGHTS_CHANGED_WARN``. Models with more than ``PROBE_ELEMENTS`` trainable elements per process
  are probed on an evenly strided sample of each tensor (every k-th element, the same ones every
  update); sharded parameters on their local shards, the counts summed over the processes.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import Tensor

from grpo_bench.config.metrics import WEIGHTS_CHANGED_WARN

PROBE_ELEMENTS = 1 << 22
"""At most about this many elements per process are compared per update (4M: 8 MB of bf16, 16 MB fp32)."""
LOW_PRECISION = {torch.bfloat16: 8, torch.float16: 11}
"""Significant bits (with the implicit one) of the low-precision storage dtypes."""


def _local(p: Tensor) -> Tensor:
    """The process's own elements of a parameter (an FSDP2 DTensor's local shard)."""
    t = p.detach()
    return t.to_local() if hasattr(t, "to_local") else t


def movable(values: Tensor, lr: float, bits: int) -> Tensor:
    """Which stored values a step of size ``lr`` changes: a value m * 2^E (m in [1/2, 1)) of a format
    with ``bits`` significant bits is spaced 2^(E - bits); the step survives rounding when it exceeds
    half that spacing, lr > 2^(E - bits - 1). Zero always moves."""
    exponent = torch.frexp(values.float()).exponent
    return (values == 0) | (lr > torch.exp2((exponent - bits - 1).float()))


def movable_share(params: list[Tensor], lr: float) -> float | None:
    """Share of the low-precision trainable elements that a step of size ``lr`` changes (``movable``);
    None when no trainable parameter is stored in bf16 / fp16."""
    moved = total = 0
    for p in params:
        bits = LOW_PRECISION.get(p.dtype)
        if bits is None:
            continue
        flat = _local(p).reshape(-1)
        sample = flat[:: max(1, flat.numel() // (1 << 16))]  # ~65k elements per tensor are enough for a share
        moved += int(movable(sample, lr, bits).sum())
        total += sample.numel()
    return moved / total if total else None


def precision_warning(params: list[Tensor], lr: float, optimizer: str = "AdamW") -> str | None:
    """The one-line warning for low-precision parameters that an ``lr`` step barely moves (None if fine)."""
    share = movable_share(params, lr)
    if share is None or share >= WEIGHTS_CHANGED_WARN:
        return None
    dtype = next(p.dtype for p in params if p.dtype in LOW_PRECISION)
    return (f"{str(dtype).removeprefix('torch.')} parameters under {optimizer} at lr {lr:g}: a step of that size "
            f"changes only {share:.0%} of the trained weights (about those with |w| < "
            f"{lr * 2.0 ** LOW_PRECISION[dtype]:.2g}); the rest round back to their value. Use param_dtype: float32 "
            "(float32 master weights, bf16 compute under mixed_precision: bf16)")


class WeightProbe:
    """The share of the trainable elements that an update's gradients reached and its optimizer steps
    changed (module docstring).

    ``begin()`` before the update's first step, ``touch()`` before every optimizer step (gradients in
    place), ``end()`` after the last: changed / reached, where an element is *reached* when some step
    of the update gave it a non-zero gradient (or changed it). Elements no gradient reaches (an
    embedding row no prompt uses, a text branch whose tokens are all padding) are not counted against
    the update. Under DeepSpeed the gradients live in the engine (``grads_visible=False``): every
    element counts as reached."""

    def __init__(self, params: list[Tensor], acc: Any = None, elements: int = PROBE_ELEMENTS,
                 grads_visible: bool = True) -> None:
        self.params, self.acc, self.grads_visible = params, acc, grads_visible
        total = sum(_local(p).numel() for p in params)
        self.stride = max(1, math.ceil(total / elements))
        self.warned = False
        self.before: list[Tensor] = []
        self.reached: list[Tensor] = []

    def _sample(self, t: Tensor) -> Tensor:
        return _local(t).reshape(-1)[:: self.stride]

    def begin(self) -> None:
        self.before = [self._sample(p).clone() for p in self.params]
        self.reached = [torch.full_like(b, not self.grads_visible, dtype=torch.bool) for b in self.before]

    def touch(self) -> None:
        """Record which probed elements the gradients about to be stepped reach."""
        if not self.grads_visible:
            return
        for p, seen in zip(self.params, self.reached):
            if p.grad is not None:
                seen |= self._sample(p.grad) != 0

    def end(self) -> float:
        """changed / reached over the probed elements of every process (NaN when nothing was reached).

        A no-op update warns every time: NaN (no gradient arrived: a detached loss) and 0 (nothing changed);
        a share below WEIGHTS_CHANGED_WARN warns once."""
        dev = self.before[0].device if self.before else torch.device("cpu")
        counts = torch.zeros(2, dtype=torch.float64, device=dev)
        for p, old, seen in zip(self.params, self.before, self.reached):
            changed = self._sample(p) != old
            counts[0] += changed.sum()
            counts[1] += (changed | seen).sum()
        if self.acc is not None and self.acc.num_processes > 1:
            counts = self.acc.reduce(counts, "sum")
        share = float(counts[0] / counts[1]) if float(counts[1]) else float("nan")
        if share != share or share == 0.0:  # a no-op update: said every time (the liveness report counts them)
            why = ("no gradient reached any trainable element (every advantage zero, as when each group's "
                   "samples all scored alike, with no KL pull yet; else a detached loss or frozen parameters)"
                   if share != share else "its optimizer steps changed none of the elements its gradients reached")
            warnings.warn(f"weights_changed {share}: this update was a no-op: {why}", stacklevel=2)
        elif share < WEIGHTS_CHANGED_WARN and not self.warned:
            self.warned = True
            warnings.warn(f"weights_changed {share:.1%}: this update's optimizer steps changed fewer than "
                          f"{WEIGHTS_CHANGED_WARN:.0%} of the trainable elements its gradients reached (bf16 "
                          "parameters at a small lr?); the run trains much less than its steps suggest", stacklevel=2)
        return share
