"""The KL weight (docs/design.md §4): constant, or a warm-up then feedback on the measured KL.

Both keep a ``value`` (the weight of the next update), ``update(kl)`` after each update with that
update's mean KL over all processes, a ``target`` (NaN for the constant weight) and a state dict for
checkpoints.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol


class KLWeightOptions(Protocol):
    """What the KL weight is built from: the run config's KL-weighting section (``KLWeighting``,
    config/sections.py); declared here so that the core names no run config. ``make_kl_weight`` reads these and
    keeps their values only."""

    kl_weight: float
    kl_adaptive: bool
    kl_beta_min: float
    kl_beta_max: float
    kl_warmup: int
    kl_target: float
    kl_window: int
    kl_target_auto: bool
    kl_feedback: str
    kl_horizon: float


@dataclass
class ConstantKLWeight:
    """A fixed KL weight (``kl_weight``)."""

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
    """Linear warm-up from beta_min to beta_max over `warmup` updates, then feedback on the KL.

    Weight of update u < warmup: beta_min + (beta_max - beta_min) * u / warmup. After it, once per
    update, with kbar the mean KL of the last `window` updates, clamped to [beta_min, beta_max]:

    - ``feedback="proportional"`` (the shipped world suites): the weight is proportional to the KL,
      w = mid * kbar / target, around the middle of the range mid = sqrt(beta_min * beta_max). With
      ``auto_target`` the target is the mean KL of `window` updates held at mid after the warm-up, so
      the KL the run has at the middle weight maps back to it. The weight leaves the range only when
      the KL is beyond target * beta_max / mid (or below target * beta_min / mid).
    - ``feedback="ziegler"`` (SAGE-GRPO's schedule as its paper states it: "linear warm-up from 1e-7 to 1e-5 over
      the first 100 steps, then proportional feedback on the historical KL"): after the warm-up the weight is
      multiplied by 1 + clip(kbar / target - 1, -0.2, 0.2) / horizon every schedule step, floored at beta_min.
      The official post_train.py imports ``AdaptiveKLController`` from hyvideo/commons/grpo_commons.py, which is
      not public; the name is that of Ziegler et al. (2019)'s controller, whose rule this is. A reading, not code.
    - ``feedback="integral"`` (release 0.3): the weight is multiplied every update; with a fixed
      target by min(kbar/target, max_factor) above 1.5 x target and max(kbar/target, 1/max_factor)
      below 0.5 x; with ``auto_target`` (the target: the warm-up's last `window` updates) by
      clamp(sqrt(kbar/target), 1/max_factor, max_factor).

    Why proportional: on the world the KL responds weakly to the weight (KL ~ w^-0.2 between constant
    weights 0.001 and 0.1), so an integrator turns every error of the measured target into a drift that
    ends on a bound (release 0.3: the weight at the ceiling in 8 of 9 DanceGRPO main-table cells, at the
    floor in the moving-anchor ablations); a proportional weight stays where the KL puts it.
    """

    beta_min: float
    beta_max: float
    warmup: int
    target: float
    window: int = 10
    max_factor: float = 2.0
    auto_target: bool = False
    feedback: str = "integral"
    """'proportional' (w = mid * kbar / target), 'integral' (the weight multiplied every update) or 'ziegler'
    (w *= 1 + clip(kbar / target - 1, -0.2, 0.2) / horizon, floored at beta_min)."""
    horizon: float = 10.0
    """'ziegler' feedback: the controller's horizon (in the schedule's units)."""
    updates: int = 0
    """Updates seen so far (the weight `value` is the one for update number `updates`)."""
    value: float = field(init=False)
    history: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.value = self.midpoint if self._holding(0) else self._warmup_value(0)

    @property
    def midpoint(self) -> float:
        """The middle of the weight range in log space (the arithmetic middle when beta_min is 0)."""
        return math.sqrt(self.beta_min * self.beta_max) if self.beta_min > 0 else 0.5 * self.beta_max

    def _holding(self, u: int) -> bool:
        """Update u belongs to the hold at the midpoint whose KL becomes the proportional target."""
        return self.feedback == "proportional" and self.auto_target and self.warmup <= u < self.warmup + self.window

    def _warmup_value(self, u: int) -> float:
        if self.warmup <= 0:
            return self.beta_max
        return self.beta_min + (self.beta_max - self.beta_min) * min(u, self.warmup) / self.warmup

    def update(self, kl: float) -> None:
        """Record one update's mean KL and set the weight of the next update."""
        u = self.updates  # the update whose KL this is
        self.history.append(float(kl))  # the hold lasts `window` updates: at its end the window is the hold's KL
        while len(self.history) > self.window:
            self.history.popleft()
        self.updates += 1
        if self.auto_target and u + 1 == (self.warmup + self.window if self.feedback == "proportional"
                                          else max(self.warmup, 1)):
            self._measure_target()
        if self._holding(self.updates):
            self.value = self.midpoint
        elif self.updates < self.warmup or (self.updates == self.warmup and self.feedback in ("integral", "ziegler")):
            self.value = self._warmup_value(self.updates)
        elif self.feedback == "proportional":
            self.value = self._clamp(self.midpoint * self._ratio())
        elif self.feedback == "ziegler":
            # Ziegler et al. 2019's adaptive KL controller (also TRL's and verl's AdaptiveKLController): the error
            # clipped to ±20%, one step of 1/horizon; no ceiling, the official kl_min_coef as a floor.
            error = min(max(self._ratio() - 1.0, -0.2), 0.2)
            self.value = max(self.value * (1.0 + error / self.horizon), self.beta_min)
        else:
            self.value = self._clamp(self.value * self._integral_factor(self._ratio()))

    def _ratio(self) -> float:
        return sum(self.history) / len(self.history) / self.target

    def _integral_factor(self, ratio: float) -> float:
        if self.auto_target:  # log-proportional steps, no dead band
            return min(max(math.sqrt(ratio), 1.0 / self.max_factor), self.max_factor) if ratio > 0 else 0.5
        if ratio > 1.5:
            return min(ratio, self.max_factor)
        if ratio < 0.5:
            return max(ratio, 1.0 / self.max_factor)
        return 1.0

    def _clamp(self, value: float) -> float:
        return min(max(value, self.beta_min), self.beta_max)

    def _measure_target(self) -> None:
        measured = sum(self.history) / len(self.history)
        if math.isfinite(measured) and measured > 0:  # an exactly zero KL cannot be a target
            self.target = measured

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "value": self.value, "history": list(self.history), "target": self.target}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates, self.value = int(state["updates"]), float(state["value"])
        self.history = deque(state["history"])
        self.target = float(state.get("target", self.target))  # checkpoints from before auto targets


def make_kl_weight(options: KLWeightOptions) -> ConstantKLWeight | AdaptiveKLWeight:
    """The KL weight built from its own section (``KLWeightOptions``: the run config's ``KLWeighting``)."""
    if options.kl_adaptive:
        return AdaptiveKLWeight(options.kl_beta_min, options.kl_beta_max, options.kl_warmup, options.kl_target,
                                options.kl_window, auto_target=options.kl_target_auto, feedback=options.kl_feedback,
                                horizon=options.kl_horizon)
    return ConstantKLWeight(options.kl_weight)
