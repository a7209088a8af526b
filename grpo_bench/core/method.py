"""The method protocol: what distinguishes DanceGRPO, FlowGRPO, CPS and SAGE-GRPO.

A method is a registered class with a typed, frozen ``MethodConfig`` of defaults and one rule:
which steps of a rollout are trained. Everything else (rollouts, loss, trust regions, the
optimizer) is shared core. Method files live in ``methods/`` (installed as grpo_bench.methods).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from grpo_bench.core.sde import KERNELS, LOGPROB_FORMS, Kernel, make_kernel, stochastic_steps
from grpo_bench.errors import UserError
from grpo_bench.registry import LazyRegistry


@dataclass(frozen=True)
class MethodConfig:
    """A method's defaults; any field can be overridden from a run config or suite."""

    kernel: str
    """Registered step kernel used at stochastic steps (`grpo-bench methods` lists them)."""
    noise_level: float
    """eta (dance, sage) or a (flow, cps): the kernel's noise scale."""
    logprob: str = "gaussian"
    """Log-prob form of a transition: 'gaussian' (averaged density) or 'unscaled' (CPS surrogate)."""
    score_term: bool = True
    """Add (var/2)*score to the Euler mean (marginal-preserving SDE); DanceGRPO can switch it off."""
    train_fraction: float = 1.0
    """Share of the eligible steps trained per sample, drawn at random per sample (DanceGRPO: 0.6)."""
    max_train_steps: int | None = None
    """Cap on trained steps per sample (random subset); None trains every selected step."""
    shared_noise: bool = False
    """All G rollouts of a prompt start from the same initial noise (DanceGRPO)."""
    clip_range: float = 1e-4
    """PPO ratio clip epsilon."""
    kl: str = "none"
    """Default KL trust region: none, fixed, stepwise, moving, dual."""
    equalizer: bool = False
    """Weight each step's loss by the gradient-norm equalizer S_i (SAGE-GRPO)."""
    window: tuple[int, int] | None = None
    """(k, w): sample with the SDE and train only on steps k..k+w-1, ODE elsewhere ('fast' variants)."""

    def __post_init__(self) -> None:
        KERNELS.get(self.kernel, where="method config: ")
        LOGPROB_FORMS.get(self.logprob, where="method config: ")
        if not (0 < self.train_fraction <= 1):
            raise UserError(f"train_fraction must be in (0, 1], got {self.train_fraction!r}")
        if not (math.isfinite(self.clip_range) and self.clip_range > 0):
            raise UserError(f"clip_range must be > 0, got {self.clip_range!r}")
        if self.max_train_steps is not None and self.max_train_steps < 1:
            raise UserError(f"max_train_steps must be >= 1 or null, got {self.max_train_steps!r}")
        if self.window is not None and (len(self.window) != 2 or self.window[0] < 0 or self.window[1] < 1):
            raise UserError(f"window must be [start >= 0, width >= 1], got {self.window!r}")


class Method:
    """Base class of every registered method."""

    name: ClassVar[str]
    defaults: ClassVar[MethodConfig]
    paper: ClassVar[str] = ""

    def __init__(self, **overrides: object) -> None:
        fields = {f.name for f in dataclasses.fields(MethodConfig)}
        bad = sorted(set(overrides) - fields)
        if bad:
            raise UserError(f"unknown method option(s) {bad}; allowed: {', '.join(sorted(fields))}")
        if overrides.get("window") is not None:
            overrides["window"] = tuple(overrides["window"])  # YAML gives lists
        self.config = dataclasses.replace(self.defaults, **overrides)
        self.kernel: Kernel = make_kernel(self.config.kernel, self.config.noise_level, self.config.score_term)

    # --- which steps are stochastic, which are trained ------------------------------------
    def sde_steps(self, sigmas: Tensor) -> Tensor:
        """Bool Tensor[T]: steps sampled with the method's kernel (the others use the ODE)."""
        mask = stochastic_steps(self.kernel, sigmas)
        if self.config.window is not None:
            k, w = self.config.window
            inside = torch.zeros_like(mask)
            inside[k : k + w] = True
            mask &= inside
        return mask

    def eligible_steps(self, sigmas: Tensor) -> Tensor:
        """Bool Tensor[T]: steps that may be trained. Default: stochastic steps among 0..T-2."""
        mask = self.sde_steps(sigmas).clone()
        mask[-1] = False
        return mask

    def train_steps(self, sigmas: Tensor, batch: int, generator: torch.Generator | None = None) -> Tensor:
        """Long Tensor[batch, K]: per sample, the indices of the steps trained this update."""
        eligible = self.eligible_steps(sigmas).nonzero().flatten()
        if eligible.numel() == 0:
            raise UserError(f"method {self.name!r}: no trainable (stochastic) step in this schedule")
        k = max(1, round(self.config.train_fraction * eligible.numel()))
        if self.config.max_train_steps is not None:
            k = min(k, self.config.max_train_steps)
        if k == eligible.numel():
            return eligible.expand(batch, k).clone()
        order = torch.rand(batch, eligible.numel(), generator=generator).argsort(dim=1)[:, :k]
        return eligible[order].sort(dim=1).values

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "paper": self.paper, **dataclasses.asdict(self.config)}


METHODS: LazyRegistry[type[Method]] = LazyRegistry("method", "grpo_bench.methods")


def register_method(name: str):
    """Class decorator: ``@register_method("sage_grpo")``."""
    return METHODS.register(name)


def make_method(name: str, **overrides: object) -> Method:
    return METHODS.get(name)(**overrides)
