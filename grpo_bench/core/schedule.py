"""Sigma schedules for rectified-flow samplers (docs/design.md §2).

``sigma = shift*s / (1 + (shift-1)*s)`` with ``s = linspace(1, 0, T+1)``: sigma_0 = 1, sigma_T = 0.
This is the shifted schedule of diffusers' ``FlowMatchEulerDiscreteScheduler`` (SD3, Wan, HunyuanVideo).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from grpo_bench.errors import UserError


def sigmas(steps: int, shift: float = 1.0, dtype: torch.dtype = torch.float64) -> Tensor:
    """The shifted schedule: a Tensor[steps + 1] from 1 down to 0."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise UserError(f"steps must be an integer >= 1, got {steps!r}")
    if not (isinstance(shift, (int, float)) and math.isfinite(shift) and shift > 0):
        raise UserError(f"shift must be a finite number > 0, got {shift!r}")
    s = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
    sig = shift * s / (1.0 + (shift - 1.0) * s)
    sig[0], sig[-1] = 1.0, 0.0  # exact ends whatever the rounding
    return sig.to(dtype)


def validate(sig: Tensor) -> Tensor:
    """Check a schedule: 1-D, at least two entries, strictly decreasing from 1 to 0."""
    if not isinstance(sig, Tensor) or sig.ndim != 1 or sig.numel() < 2:
        raise UserError("a sigma schedule must be a 1-D tensor with at least 2 entries (steps >= 1)")
    s = sig.detach().double().cpu()
    if not torch.isfinite(s).all():
        raise UserError("the sigma schedule contains a non-finite value")
    if abs(float(s[0]) - 1.0) > 1e-6 or abs(float(s[-1])) > 1e-6:
        raise UserError(
            f"the sigma schedule must start at 1 and end at 0, got {float(s[0]):.6g} … {float(s[-1]):.6g}"
        )
    if not bool((s[1:] < s[:-1]).all()):
        raise UserError("the sigma schedule must be strictly decreasing")
    return sig

