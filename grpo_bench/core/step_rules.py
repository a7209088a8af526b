"""Step rules: which steps of an update are sampled with the SDE and trained, the ODE elsewhere (docs/design.md §3b).

A step rule is a component of its own, like the kernel: every method declares its default as one registered rule
with parameters (``Method.own_step_rule``), and a run may choose another (``step_rule=window`` with ``steps.<key>``
dotted parameters). Core names no method here; the shipped rules are

    all      every stochastic step (no per-update schedule: the method's static SDE steps)
    window   ``size`` consecutive steps in [range_start, range_end): drawn per update (random), at range_start
             (fixed), or moving ``stride`` steps every ``iters_per_window`` updates and rolling back (sliding)
    sparse   ``n`` distinct steps drawn per update from [int(T * range_start), int(T * range_end))
    branch   one step per update, uniform among the trainable steps: the group shares its noise and ODE prefix
             and branches there, so it needs ``shared_noise: true``

A rule maps (eligible steps, T, update, generator) to the update's active steps (Bool[T]) or None (static), and
refuses before any work a run it leaves without a trained step (``check``). The draws consume the generator
exactly as the method code they replaced did, so a method's runs are the same numbers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, NamedTuple

import torch
from pydantic import Field
from torch import Tensor

from grpo_bench import params as plugin_params
from grpo_bench.errors import UserError
from grpo_bench.params import NoParams, PluginParams
from grpo_bench.registry import Registry

PREFIX = "steps"
"""Dotted prefix of a step rule's parameters on the command line and in suites (``steps.size=3``)."""


class RuleSpec(NamedTuple):
    """A rule as a method declares its default: the registered name, its parameter values, and the keys a user sets
    them by (a method's own ``method.window_size`` rather than ``steps.size``, so refusals name what to change)."""

    name: str
    params: Mapping[str, Any] = {}
    keys: Mapping[str, str] = {}


class StepRule(ABC):
    """Base of every registered step rule."""

    name: ClassVar[str]
    Params: ClassVar[type[PluginParams]] = NoParams
    static: ClassVar[bool] = False
    """True: no per-update schedule (the rollout samples the method's static SDE steps, the closed-form compute
    count applies)."""

    def __init__(self, params: PluginParams, keys: Mapping[str, str] | None = None) -> None:
        self.params = params
        self._keys = dict(keys or {})

    def key(self, field: str) -> str:
        """How the user sets ``field``: the method parameter that declared it, else ``steps.<field>``."""
        return self._keys.get(field, f"{PREFIX}.{field}")

    @abstractmethod
    def active(self, eligible: Tensor, update: int, generator: torch.Generator | None) -> Tensor | None:
        """Bool Tensor[T] of update ``update``'s SDE-and-trained steps; None: the static steps."""

    def check(self, eligible: Tensor, shared_noise: bool, owner: str) -> None:
        """Refuse (UserError, one line) a rule that leaves some update without a trained step, before any work."""
        if not eligible.any():
            raise UserError(f"{owner}: no trainable (stochastic) step with steps={eligible.numel()}")

    def describe(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.params.model_dump().items())
        return f"{self.name}({shown})" if shown else self.name


STEP_RULES: Registry[type[StepRule]] = Registry("step rule")


def register_step_rule(name: str):
    """Class decorator: ``@register_step_rule("window")``."""
    return STEP_RULES.register(name)


def make_step_rule(spec: RuleSpec, overrides: Mapping[str, Any] | None = None, owner: str = "") -> StepRule:
    """The rule ``spec`` names, its parameters refined by ``overrides`` (``steps.*`` without the prefix)."""
    cls = STEP_RULES.get(spec.name, where=f"{owner}: step_rule: " if owner else "")
    values = {**spec.params, **(overrides or {})}
    return cls(plugin_params.parse(cls.Params, values, PREFIX, f"step rule {spec.name!r}"), spec.keys)


def _mask(steps: int, idx: Any) -> Tensor:
    mask = torch.zeros(steps, dtype=torch.bool)
    mask[idx] = True
    return mask


@register_step_rule("all")
class EveryStep(StepRule):
    """Every stochastic step is sampled with the SDE and may be trained."""

    static = True

    def active(self, eligible, update, generator):
        return None


class WindowParams(PluginParams):
    size: int = Field(3, ge=1)
    """Consecutive SDE (and trained) steps."""
    range_start: int = Field(0, ge=0)
    """Lowest first step of the window."""
    range_end: int | None = None
    """Exclusive end of the window's range; negative counts from T (-2: T - 2); None: T // 2 (at least size) for a
    random window (Flow-GRPO-Fast's configs), T for a fixed or sliding one."""
    placement: Literal["random", "fixed", "sliding"] = "random"
    """random: start uniform in [range_start, range_end - size], drawn per update; fixed: at range_start;
    sliding: from range_start, moving ``stride`` steps every ``iters_per_window`` updates, back at the end."""
    iters_per_window: int = Field(25, ge=1)
    """Sliding: updates before the window moves."""
    stride: int = Field(1, ge=1)
    """Sliding: steps the window moves."""


@register_step_rule("window")
class Window(StepRule):
    """A window of consecutive SDE steps, every one trained; the ODE elsewhere."""

    Params = WindowParams

    def end(self, steps: int) -> int:
        end = self.params.range_end
        if end is None:
            return max(steps // 2, self.params.size) if self.params.placement == "random" else steps
        return steps + end if end < 0 else end

    def start(self, steps: int, update: int, generator: torch.Generator | None) -> int:
        p, end = self.params, self.end(steps)
        if p.placement == "random":
            return int(torch.randint(p.range_start, end - p.size + 1, (1,), generator=generator))
        if p.placement == "fixed":
            return p.range_start
        positions = max(1, -(-(end - p.range_start) // p.stride))  # starts below `end`, then back to range_start
        return p.range_start + (update // p.iters_per_window) % positions * p.stride

    def active(self, eligible, update, generator):
        steps = eligible.numel()
        start = self.start(steps, update, generator)
        return _mask(steps, slice(start, min(start + self.params.size, self.end(steps))))

    def check(self, eligible, shared_noise, owner):
        p, steps = self.params, eligible.numel()
        end = self.end(steps)
        if p.placement == "random":
            if end - p.size < p.range_start or end > steps:
                raise UserError(f"{owner}: {self.key('size')}={p.size} does not fit in the window range "
                                f"[{p.range_start}, {end}) of a {steps}-step schedule; allowed: "
                                f"{self.key('range_start')} + {self.key('size')} <= {self.key('range_end')} <= steps")
            for start in range(p.range_start, end - p.size + 1):  # every start the draw can take
                if not eligible[start : start + p.size].any():
                    raise UserError(f"{owner}: the window at steps {start}..{start + p.size - 1} has no trained "
                                    f"(stochastic) step with steps={steps}")
        # fixed and sliding windows are deterministic: Method.check_run tries every update's window


class SparseParams(PluginParams):
    n: int = Field(3, ge=1)
    """Distinct SDE (and trained) steps drawn per update."""
    range_start: float = Field(0.0, ge=0, lt=1)
    """The draw's range [int(T * range_start), int(T * range_end))."""
    range_end: float = Field(0.5, gt=0, le=1)


@register_step_rule("sparse")
class Sparse(StepRule):
    """``n`` distinct SDE steps drawn per update from a share of the schedule, every one trained."""

    Params = SparseParams

    def pool(self, steps: int) -> tuple[int, int]:
        return int(steps * self.params.range_start), int(steps * self.params.range_end)

    def active(self, eligible, update, generator):
        steps = eligible.numel()
        lo, hi = self.pool(steps)
        return _mask(steps, lo + torch.randperm(hi - lo, generator=generator)[: self.params.n])

    def check(self, eligible, shared_noise, owner):
        steps = eligible.numel()
        lo, hi = self.pool(steps)
        trainable = int(eligible[lo:hi].sum()) if hi > lo else 0
        if trainable < self.params.n:
            raise UserError(f"{owner}: {self.key('n')}={self.params.n} distinct trained steps do not fit in "
                            f"[{lo}, {hi}) of a {steps}-step schedule ({trainable} trainable there); allowed: "
                            f"{self.key('n')} <= the stochastic steps in [int(T*{self.key('range_start')}), "
                            f"int(T*{self.key('range_end')}))")


@register_step_rule("branch")
class Branch(StepRule):
    """One branching step per update, uniform among the trainable steps: the G rollouts of a prompt share one
    initial noise and one ODE trajectory up to it, so each reward is credited to that step alone."""

    def active(self, eligible, update, generator):
        idx = eligible.nonzero().flatten()
        return _mask(eligible.numel(), idx[int(torch.randint(0, idx.numel(), (1,), generator=generator))])

    def check(self, eligible, shared_noise, owner):
        super().check(eligible, shared_noise, owner)
        if not shared_noise:
            raise UserError(f"{owner}: step rule 'branch' branches the G rollouts of a prompt from one ODE "
                            "trajectory: it needs shared_noise: true (got shared_noise: false)")
