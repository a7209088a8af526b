"""The method protocol: what distinguishes one GRPO variant from another (docs/design.md §3a).

A method is a registered class with a typed, frozen ``MethodConfig`` of defaults, its own parameters
(``Params``, set as ``method.<key>``) and a few declared hooks; everything else (rollouts, loss, trust
regions, the optimizer) is shared core, and core never names a method:

    sde_steps / eligible_steps   which steps are stochastic, which may be trained (static)
    own_step_rule()              the method's step rule (core/step_rules.py STEP_RULES: all, window, sparse, branch)
    update_steps(sigmas, u, g)   the steps that are SDE *and* trained at update u (the step rule's); None: static
    share_prefix                 the group's rollouts share the ODE prefix before the first SDE step (branching)
    objective                    the registered per-step ratio objective (core/loss.py OBJECTIVES: clip, mask, ...)
    loss_family                  the registered loss family (core/loss.py LOSS_FAMILIES); one may need no log-prob
    anchor_policies()            anchors the method's loss needs besides the KL variant's (e.g. an EMA old policy)
    rollout_anchor               one of those anchors samples the rollouts instead of the current policy
    trained_count(n)             how many of n eligible steps each sample trains (before max_train_steps)
    check_run(sigmas, run)       bad input before any work: a window with no trained step, a group it cannot fill

Method files live in ``methods/`` (installed as grpo_bench.methods).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from grpo_bench import params as plugin_params
from grpo_bench.core.sde import LOGPROB_FORMS, Kernel, make_kernel, stochastic_steps
from grpo_bench.core.step_rules import PREFIX as STEPS_PREFIX
from grpo_bench.core.step_rules import RuleSpec, StepRule, make_step_rule
from grpo_bench.errors import UserError
from grpo_bench.params import NoParams, PluginParams
from grpo_bench.registry import Registry


class RunShape(NamedTuple):
    """What a method's ``check_run`` may see of a run: its length and how a batch is grouped."""

    updates: int
    group_size: int
    shared_noise: bool


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
    """Default KL trust region: none, fixed, flow_grpo, stepwise, moving, dual."""
    equalizer: bool = False
    """Weight each step's loss by the gradient-norm equalizer S_i (SAGE-GRPO)."""
    adv_norm: str = "group"
    """The advantage scale the method's code uses (core/advantages.py ADV_NORMS): a run's ``adv_norm: null``
    (the as-shipped readings) takes it; a run's explicit value overrides it."""
    window: tuple[int, int] | None = None
    """(k, w): sample with the SDE and train only on steps k..k+w-1, ODE elsewhere ('fast' variants)."""
    step_rule: str | None = None
    """Registered step rule (core/step_rules.py) a run chose in place of the method's own; None: the method's own
    (``Method.own_step_rule``). Its parameters are ``steps.<key>``."""
    objective: str | None = None
    """Registered ratio objective (core/loss.py OBJECTIVES) a run chose in place of the method's own; None: its own."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Plug-in parameters the method sets by default, dotted: {"kernel.gamma": 0.3, "anchor.tau": 0.99}."""

    def __post_init__(self) -> None:
        # Kernel and log-prob names are checked when a Method is built (make_method), not here: a
        # method file may define its defaults before the registries hold every plug-in.
        bad = sorted(k for k in self.params if not plugin_params.is_param_key(k))
        if bad:
            raise UserError(f"method params {bad}: keys are '<component>.<name>' with component one of "
                            f"{', '.join(plugin_params.PREFIXES)}")
        if not (0 < self.train_fraction <= 1):
            raise UserError(f"train_fraction must be in (0, 1], got {self.train_fraction!r}")
        if not (math.isfinite(self.clip_range) and self.clip_range > 0):
            raise UserError(f"clip_range must be > 0, got {self.clip_range!r}")
        if self.max_train_steps is not None and self.max_train_steps < 1:
            raise UserError(f"max_train_steps must be >= 1 or null, got {self.max_train_steps!r}")
        from grpo_bench.core.advantages import ADV_NORMS

        if self.adv_norm not in ADV_NORMS:
            raise UserError(f"adv_norm must be one of {', '.join(ADV_NORMS)}, got {self.adv_norm!r}")
        if self.window is not None and (len(self.window) != 2 or self.window[0] < 0 or self.window[1] < 1):
            raise UserError(f"window must be [start >= 0, width >= 1], got {self.window!r}")


class Method:
    """Base class of every registered method."""

    name: ClassVar[str]
    defaults: ClassVar[MethodConfig]
    paper: ClassVar[str] = ""
    source: ClassVar[str] = ""
    """Where its formulas were read: the official repository and files, or "paper" when no code was read."""
    Params: ClassVar[type[PluginParams]] = NoParams
    """The method's own parameters (``method.<key>=value``), read as ``self.params.<key>``."""
    objective: ClassVar[str] = "clipped"
    """Registered per-step ratio objective (core/loss.py ``OBJECTIVES``)."""
    loss_family: ClassVar[str] = "policy_gradient"
    """Registered loss family (core/loss.py ``LOSS_FAMILIES``)."""
    share_prefix: ClassVar[bool] = False
    """With shared group noise, the G rollouts of a prompt share the ODE prefix before the first SDE step:
    the rollout computes it once per group (the same values, G times fewer forwards there)."""
    step_rule: ClassVar[str] = ""
    """One line for ``grpo-bench methods``: which steps are SDE and trained."""
    rollout_anchor: ClassVar[str | None] = None
    """The name of one of the method's own anchors (``anchor_policies``) whose parameters sample the rollouts
    (an old policy that lags the trained one); None: the current policy samples them."""
    revision: ClassVar[int] = 0
    """The recipe's revision: raised when a method's defaults or code change what its runs compute, so its
    cell ids change with it (a stored cell of the old recipe is never taken for the new); 0 stays out of ids."""

    def __init__(self, **overrides: Any) -> None:
        fields = {f.name for f in dataclasses.fields(MethodConfig)}
        bad = sorted(set(overrides) - fields)
        if bad:
            raise UserError(f"unknown method option(s) {bad}; allowed: {', '.join(sorted(fields))}")
        if overrides.get("window") is not None:
            overrides["window"] = tuple(overrides["window"])  # YAML gives lists
        if "params" in overrides:  # a run's plug-in parameters refine the method's, key by key
            overrides["params"] = {**self.defaults.params, **(overrides["params"] or {})}
        self.config = dataclasses.replace(self.defaults, **overrides)
        LOGPROB_FORMS.get(self.config.logprob, where=f"method {self.name!r}: logprob: ")
        self.kernel: Kernel = make_kernel(self.config.kernel, self.config.noise_level, self.config.score_term,
                                          plugin_params.component(self.config.params, "kernel"))
        self.params = plugin_params.parse(self.Params, plugin_params.component(self.config.params, "method"),
                                          "method", f"method {self.name!r}")
        from grpo_bench.core.loss import LOSS_FAMILIES, OBJECTIVES  # a hook core does not hold: one line, now

        owner = f"method {self.name!r}"
        if self.config.objective is not None:  # the run's choice, for this instance only
            self.objective = self.config.objective
        OBJECTIVES.get(self.objective, where=f"{owner}: objective: ")
        family = LOSS_FAMILIES.get(self.loss_family, where=f"{owner}: loss_family: ")
        if not self.own_objective and not getattr(family, "needs_logprob", True):
            raise UserError(f"{owner}: objective {self.objective!r} is a ratio of log-probs, and its loss family "
                            f"{self.loss_family!r} computes none; allowed: leave objective unset for this method")
        own_anchors = self.anchor_policies()
        if self.rollout_anchor is not None and self.rollout_anchor not in own_anchors:
            raise UserError(f"method {self.name!r}: rollout_anchor {self.rollout_anchor!r} is not one of its "
                            f"anchors; allowed: {', '.join(own_anchors) or 'none (anchor_policies() is empty)'}")
        own = self.own_step_rule()
        spec = own if self.config.step_rule in (None, own.name) else RuleSpec(self.config.step_rule)
        self.rule: StepRule = make_step_rule(spec, plugin_params.component(self.config.params, STEPS_PREFIX), owner)
        self.own_rule = spec is own and self.rule.params == make_step_rule(own).params

    @property
    def own_objective(self) -> bool:
        """True when the run uses the method's own objective (which then reads the method's parameters)."""
        return self.objective == type(self).objective

    def own_step_rule(self) -> RuleSpec:
        """The method's default step rule: a registered rule with its parameter values (core/step_rules.py)."""
        return RuleSpec("all")

    def step_rule_params(self) -> dict[str, Any]:
        """``steps.*`` of the resolved config: none for the method's own rule (its parameters are the method's),
        every value, defaults filled in, for a rule the run chose or refined."""
        return {} if self.own_rule else plugin_params.dump(self.rule.params, STEPS_PREFIX)

    # --- declared hooks (defaults: a static rule, the clipped objective, nothing else) --------
    @property
    def needs_logprob(self) -> bool:
        """False for a likelihood-free loss family: its trained steps need not be stochastic."""
        from grpo_bench.core.loss import LOSS_FAMILIES

        return bool(getattr(LOSS_FAMILIES.get(self.loss_family, where=f"method {self.name!r}: loss_family: "),
                            "needs_logprob", True))

    def update_steps(self, sigmas: Tensor, update: int, generator: torch.Generator | None = None) -> Tensor | None:
        """Bool Tensor[T]: the steps sampled with the kernel *and* trainable at update ``update`` (the step rule's
        window, sparse draw or branching step); ODE elsewhere. None (rule ``all``): the static ``sde_steps``."""
        if self.rule.static:
            return None
        active = self.rule.active(self.eligible_steps(sigmas), update, generator)
        # a window reaching a deterministic step (CPS's last, on a short schedule) samples that step by ODE
        return None if active is None else active & self.sde_steps(sigmas)

    def anchor_policies(self) -> dict[str, str]:
        """Anchor name -> registered update policy the method's loss needs besides the KL variant's."""
        return {}

    def anchor_params(self) -> dict[str, Any]:
        """Parameters (without prefix) of the method's own anchor policies."""
        return {}

    def trained_count(self, eligible: int) -> int:
        """How many of ``eligible`` steps each sample trains, before the ``max_train_steps`` cap: by default
        ``round(train_fraction * eligible)``, at least 1."""
        return max(1, round(self.config.train_fraction * eligible))

    def check_run(self, sigmas: Tensor, run: RunShape) -> None:
        """Refuse (UserError) a run this method cannot train, before any work: by default, a window schedule
        that leaves some update without a trained step, or prefix sharing without a group to share it."""
        if self.config.equalizer and not stochastic_steps(self.kernel, sigmas).any():
            # the equalizer gives a deterministic step S = 0 (core/sde.py): with no noised step every loss term
            # is weighted 0 and the run would end with the base weights (a likelihood-free method's ODE kernel)
            raise UserError(f"method {self.name!r}: equalizer=on with kernel {self.config.kernel!r}, which noises no "
                            "step, weights every step's loss by 0 and trains nothing; allowed: equalizer=off for "
                            "this method, or a stochastic kernel")
        eligible = self.eligible_steps(sigmas)
        self.rule.check(eligible, run.shared_noise, f"method {self.name!r}")
        stride = max(1, run.updates // 500)  # every update of a world run; 500 spread ones of a longer run
        for u in sorted({*range(0, run.updates, stride), run.updates - 1}):
            active = self.update_steps(sigmas, u, torch.Generator().manual_seed(u))
            if active is not None and not (active & eligible).any():
                raise UserError(f"method {self.name!r}: its window schedule leaves no trained step at update {u} "
                                f"(steps={len(sigmas) - 1}); widen the window or use more steps")

    def describe(self) -> dict[str, str]:
        """What ``grpo-bench methods`` prints: kernel, trained-step rule, loss family, source."""
        family = self.loss_family if self.objective == "clipped" else f"{self.loss_family} ({self.objective})"
        steps = (self.step_rule or _default_rule(self.config)) if self.own_rule else self.rule.describe()
        return {"kernel": self.config.kernel, "steps": steps,
                "loss": family, "source": self.source or self.paper}

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

    def train_steps(self, sigmas: Tensor, batch: int, generator: torch.Generator | None = None,
                    active: Tensor | None = None) -> Tensor:
        """Long Tensor[batch, K]: per sample, the indices of the steps trained this update; ``active``
        (Bool[T], from ``update_steps``) restricts them to this update's window."""
        mask = self.eligible_steps(sigmas)
        if active is not None:
            mask = mask & active
        eligible = mask.nonzero().flatten()
        if eligible.numel() == 0:
            raise UserError(f"method {self.name!r}: no trainable (stochastic) step in this schedule")
        k = min(max(1, self.trained_count(eligible.numel())), eligible.numel())
        if self.config.max_train_steps is not None:
            k = min(k, self.config.max_train_steps)
        if k == eligible.numel():
            return eligible.expand(batch, k).clone()
        order = torch.rand(batch, eligible.numel(), generator=generator).argsort(dim=1)[:, :k]
        return eligible[order].sort(dim=1).values

def _default_rule(cfg: MethodConfig) -> str:
    if cfg.window is not None:
        return f"steps {cfg.window[0]}..{cfg.window[0] + cfg.window[1] - 1} (window)"
    if cfg.train_fraction < 1:
        return f"random {cfg.train_fraction:.0%} of 0..T-2"
    return "stochastic steps 0..T-2"


METHODS: Registry[type[Method]] = Registry("method")


def register_method(name: str):
    """Class decorator: ``@register_method("sage_grpo")``."""
    return METHODS.register(name)


def make_method(name: str, **overrides: object) -> Method:
    return METHODS.get(name)(**overrides)
