"""The KL weight (docs/design.md §4): constant, or a warm-up then feedback on the measured KL.

Both keep a ``value`` (the weight of the next update), ``update(kl)`` after each update with that
update's mean KL over all processes, a ``target`` (NaN for the constant weight) and a state dict for
checkpoints.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ConstantKLWeight:
    """A fixed KL weight (cfg.kl_weight)."""

    value: float
    target: float = float("nan")
    """No target: a constant weight does not follow the KL (logged as NaN)."""

    def update(self, kl: float) -> None:
        """Constant: the observed KL does not change the weight."""

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


@dataclass
class AdaptiveKLWeight:
    """Linear warm-up from beta_min to beta_max over `warmup` updates, then proportional feedback.

    Weight of update u < warmup: beta_min + (beta_max - beta_min) * u / warmup. After the
    warm-up, once per update, with kbar the mean KL of the last `window` updates: kbar >
    1.5*target multiplies the weight by min(kbar/target, max_factor) (raise it), kbar < 0.5*target
    by max(kbar/target, 1/max_factor) (lower it); inside the band it stays. Clamped to
    [beta_min, beta_max].

    ``auto_target``: the target is not guessed but measured: at the end of the warm-up it becomes
    the mean KL of the last `window` warm-up updates (the KL the run reaches while the weight sweeps
    its range), and the feedback is proportional in log space without a dead band, factor =
    clamp(sqrt(kbar/target), 1/max_factor, max_factor), so the weight rises and falls around a
    reachable level every update. (A fixed target far from the run's KL only ever pushes the weight
    to one of its bounds: measured on the stored main table, at the floor from update ~17.)
    """

    beta_min: float
    beta_max: float
    warmup: int
    target: float
    window: int = 10
    max_factor: float = 2.0
    auto_target: bool = False
    updates: int = 0
    """Updates seen so far (the weight `value` is the one for update number `updates`)."""
    value: float = field(init=False)
    history: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.value = self._warmup_value(0)

    def _warmup_value(self, u: int) -> float:
        if self.warmup <= 0:
            return self.beta_max
        return self.beta_min + (self.beta_max - self.beta_min) * min(u, self.warmup) / self.warmup

    def update(self, kl: float) -> None:
        """Record one update's mean KL and set the weight of the next update."""
        self.history.append(float(kl))
        while len(self.history) > self.window:
            self.history.popleft()
        self.updates += 1
        if self.auto_target and self.updates == max(self.warmup, 1):
            measured = sum(self.history) / len(self.history)
            if math.isfinite(measured) and measured > 0:  # an exactly zero KL cannot be a target
                self.target = measured
        if self.updates <= self.warmup:
            self.value = self._warmup_value(self.updates)
            return
        ratio = sum(self.history) / len(self.history) / self.target
        factor = 1.0
        if self.auto_target:  # proportional in log space, no dead band: the weight tracks the target
            factor = min(max(math.sqrt(ratio), 1.0 / self.max_factor), self.max_factor) if ratio > 0 else 0.5
        elif ratio > 1.5:
            factor = min(ratio, self.max_factor)
        elif ratio < 0.5:
            factor = max(ratio, 1.0 / self.max_factor)
        self.value = min(max(self.value * factor, self.beta_min), self.beta_max)

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "value": self.value, "history": list(self.history), "target": self.target}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates, self.value = int(state["updates"]), float(state["value"])
        self.history = deque(state["history"])
        self.target = float(state.get("target", self.target))  # checkpoints from before auto targets


def make_kl_weight(cfg: Any) -> ConstantKLWeight | AdaptiveKLWeight:
    if cfg.kl_adaptive:
        return AdaptiveKLWeight(cfg.kl_beta_min, cfg.kl_beta_max, cfg.kl_warmup, cfg.kl_target, cfg.kl_window,
                                auto_target=getattr(cfg, "kl_target_auto", False))
    return ConstantKLWeight(cfg.kl_weight)
