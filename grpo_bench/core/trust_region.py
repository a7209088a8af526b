"""Trust regions (docs/design.md §4): KL anchors and their update policies, the KL variants, the KL weight.

For Gaussian steps of equal variance the per-step KL is analytic,
``KL(pi_theta || pi_ref) = mean_e[(mu_theta - mu_ref)^2] / (2 var)``. An anchored variant needs
mu_ref, the anchor policy's mean at the stored transition; the rollout computes it under no_grad
(one extra batched forward per stored step per anchor), so training needs no extra forward.

Anchors are snapshots of the *trainable* parameters only, evaluated with
``torch.func.functional_call``. For full fine-tuning that is the whole net; for LoRA the initial
snapshot has B = 0, i.e. exactly "adapters disabled". One mechanism, no special cases. A KL
variant names its anchors and, per anchor, a registered update policy (``ANCHOR_POLICIES``):

    variant    reference                         anchors (policy)      estimator
    none       -                                 -                     -
    fixed      pi_0                              initial (never)       analytic
    stepwise   pi_{k-1} (the rollout policy)     -                     sample: logp_old - logp (or analytic on mu_old)
      (stepwise_ref: previous)  the policy before the last optimizer step   previous (previous, live)   analytic
    moving     pi_{k-N}                          moving (every)        analytic
    dual       beta_pos * moving + beta_vel * stepwise

A *live* anchor (its policy's ``live = True``) changes between the optimizer steps of one update, so
its mean is evaluated at loss time (one extra no-grad forward per trained step) instead of stored
by the rollout.

The KL weight (constant or adaptive) is ``grpo_bench.core.kl_weight``.

Plug-in KL variants and policies register with ``register_kl`` / ``register_anchor_policy``;
their own parameters are set as ``kl.<key>`` / ``anchor.<key>`` (grpo_bench.params).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.func import functional_call

from grpo_bench import params as plugin_params
from grpo_bench.core import dtensors
from grpo_bench.errors import UserError
from grpo_bench.params import NoParams, PluginParams
from grpo_bench.registry import Registry

KL_VARIANTS: Registry[type[KLVariant]] = Registry("KL variant")
KL = "kl"
"""The penalty every KL variant returns (and its metric name); other keys are named parts, logged only."""
KL_MOVING, KL_STEPWISE = "kl_moving", "kl_stepwise"
"""The dual variant's parts: the moving-anchor (position) and stepwise (velocity) KL."""
ANCHOR_POLICIES: Registry[type[AnchorPolicy]] = Registry("anchor update policy")


def register_kl(name: str):
    """Class decorator: ``@register_kl("dual")`` on a ``KLVariant`` subclass."""
    return KL_VARIANTS.register(name)


def register_anchor_policy(name: str):
    """Class decorator: ``@register_anchor_policy("ema")`` on an ``AnchorPolicy`` subclass."""
    return ANCHOR_POLICIES.register(name)


def _params_of(cfg: Any) -> dict[str, Any]:
    return dict(getattr(cfg, "params", None) or {})


# --- anchor update policies --------------------------------------------------------------------
class AnchorPolicy(ABC):
    """When and how an anchor snapshot follows the policy after an optimizer step.

    Parameters of its own go in a nested ``Params`` model, set as ``anchor.<key>=value``; ``cfg``
    is the run config (for settings shared by all policies, such as ``anchor_every``)."""

    name: str
    Params: type[PluginParams] = NoParams
    live: ClassVar[bool] = False
    """True: the snapshot changes within an update (before_step), so the loss evaluates the anchor's
    mean itself; False: the rollout stores it once per update."""

    def __init__(self, cfg: Any = None, **params: Any) -> None:
        self.cfg = cfg
        self.params = plugin_params.parse(self.Params, params, "anchor", f"anchor policy {self.name!r}")

    def before_step(self, snapshot: dict[str, Tensor], policy: dict[str, Tensor]) -> bool:
        """Called before every optimizer step (after its backward); True if the snapshot changed."""
        return False

    @abstractmethod
    def update(self, snapshot: dict[str, Tensor], policy: dict[str, Tensor], optimizer_steps: int) -> bool:
        """Update ``snapshot`` in place from ``policy`` (same names; local shards) after optimizer step
        number ``optimizer_steps`` (1-based); True if it changed."""


@register_anchor_policy("never")
class NeverUpdate(AnchorPolicy):
    """The anchor stays the initial policy pi_0."""

    def update(self, snapshot, policy, optimizer_steps):
        return False


@register_anchor_policy("every")
class EveryN(AnchorPolicy):
    """Copy the policy into the anchor every N optimizer steps (N = the run's anchor_every)."""

    def __init__(self, cfg: Any = None, **params: Any) -> None:
        super().__init__(cfg, **params)
        self.every = int(getattr(cfg, "anchor_every", 10))
        if self.every < 1:
            raise UserError(f"anchor policy 'every': anchor_every must be >= 1, got {self.every!r}")

    def update(self, snapshot, policy, optimizer_steps):
        if optimizer_steps % self.every:
            return False
        for n, p in policy.items():
            snapshot[n].copy_(p)
        return True


@register_anchor_policy("ema")
class EMA(AnchorPolicy):
    """Exponential moving average: anchor <- tau * anchor + (1 - tau) * policy after every optimizer step."""

    class Params(PluginParams):
        tau: float = 0.9
        """Weight of the old anchor, in [0, 1): 0 copies the policy every step."""

    def __init__(self, cfg: Any = None, **params: Any) -> None:
        super().__init__(cfg, **params)
        if not 0 <= self.params.tau < 1:
            raise UserError(f"anchor policy 'ema': anchor.tau must be in [0, 1), got {self.params.tau!r}")

    def update(self, snapshot, policy, optimizer_steps):
        for n, p in policy.items():
            snapshot[n].lerp_(p.to(snapshot[n].dtype), 1.0 - self.params.tau)
        return True


@register_anchor_policy("previous")
class PreviousStep(AnchorPolicy):
    """The policy as it was before the last optimizer step: copied just before each step is taken,
    so the loss of step s compares pi_{theta_{s-1}} with pi_{theta_{s-2}} (live: evaluated at loss time)."""

    live = True

    def before_step(self, snapshot, policy):
        for n, p in policy.items():
            snapshot[n].copy_(p)
        return True

    def update(self, snapshot, policy, optimizer_steps):
        return False


def make_anchor_policy(name: str, cfg: Any = None, params: dict[str, Any] | None = None) -> AnchorPolicy:
    """A registered policy; ``params`` without the ``anchor.`` prefix (default: the config's ``anchor.*``).

    Keys no parameter of this policy declares are left to the other policies of the variant
    (``validate_params`` reports keys nobody takes)."""
    cls = ANCHOR_POLICIES.get(name)
    values = plugin_params.component(_params_of(cfg), "anchor") if params is None else dict(params)
    return cls(cfg, **{k: v for k, v in values.items() if k in cls.Params.model_fields})


# --- KL variants -----------------------------------------------------------------------------
def analytic_kl(mu: Tensor, mu_ref: Tensor, var: Tensor) -> Tensor:
    """mean_e[(mu - mu_ref)^2] / (2 var): Tensor[b] for mu, mu_ref: [b, ...] and var: [b]."""
    return (mu.float() - mu_ref.float()).pow(2).flatten(1).mean(1) / (2 * var)


@dataclass
class KLInputs:
    """What a KL estimator may use for one trained step of b samples."""

    mu: Tensor  # [b, C, F, H, W] the policy's mean (with grad)
    logp: Tensor  # [b] the policy's log-prob of x_next (with grad)
    logp_old: Tensor  # [b] rollout log-prob
    mu_old: Tensor  # [b, C, F, H, W] rollout mean
    mu_ref: dict[str, Tensor]  # anchor name -> [b, C, F, H, W] anchor mean (from the rollout)
    var: Tensor  # [b] kernel variance of the step


class KLVariant(ABC):
    """A KL trust region: which anchors it needs (each with its update policy) and its per-sample estimate.

    Parameters of its own go in a nested ``Params`` model, set as ``kl.<key>=value`` and read as
    ``self.params.<key>``."""

    name: str
    anchors: ClassVar[Mapping[str, str]] = {}
    """Anchor name -> registered update policy; the rollout computes each anchor's mu_ref."""
    Params: type[PluginParams] = NoParams

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.params = plugin_params.parse(self.Params, plugin_params.component(_params_of(cfg), "kl"), "kl",
                                          f"KL variant {self.name!r}")

    def anchor_policies(self) -> dict[str, AnchorPolicy]:
        """Anchor name -> its update policy, built from the run config."""
        return {anchor: make_anchor_policy(policy, self.cfg) for anchor, policy in self.anchors.items()}

    @abstractmethod
    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        """{'kl': Tensor[b], ...named parts}: the penalty per sample (parts are for logging)."""


@register_kl("none")
class NoKL(KLVariant):
    """No trust region."""

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        return {KL: torch.zeros_like(inp.logp)}


@register_kl("fixed")
class FixedKL(KLVariant):
    """KL to the initial policy pi_0 (FlowGRPO)."""

    anchors = {"initial": "never"}

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        return {KL: analytic_kl(inp.mu, inp.mu_ref["initial"], inp.var)}


@register_kl("stepwise")
class StepwiseKL(KLVariant):
    """KL to the rollout policy pi_{k-1}: sample estimate mean(logp_old - logp) (docs/design.md §4).

    With ``stepwise_ref: previous`` the reference is instead the policy before the last optimizer
    step (a live ``previous`` anchor), analytic: a KL between consecutive iterates."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        if getattr(cfg, "stepwise_ref", "rollout") == "previous":
            self.anchors = {"previous": "previous"}

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        if "previous" in self.anchors:
            return {KL: analytic_kl(inp.mu, inp.mu_ref["previous"], inp.var)}
        if self.cfg.stepwise_estimator == "analytic":
            return {KL: analytic_kl(inp.mu, inp.mu_old, inp.var)}
        return {KL: inp.logp_old - inp.logp}


@register_kl("moving")
class MovingKL(KLVariant):
    """KL to a moving anchor pi_{k-N}, copied from the policy every N optimizer steps."""

    anchors = {"moving": "every"}

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        return {KL: analytic_kl(inp.mu, inp.mu_ref["moving"], inp.var)}


@register_kl("dual")
class DualKL(KLVariant):
    """SAGE-GRPO's position-velocity controller: beta_pos * moving + beta_vel * stepwise."""

    anchors = {"moving": "every"}

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.position, self.velocity = MovingKL(cfg), StepwiseKL(cfg)
        self.anchors = {**self.position.anchors, **self.velocity.anchors}

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        pos, vel = self.position(inp)[KL], self.velocity(inp)[KL]
        return {KL: self.cfg.beta_pos * pos + self.cfg.beta_vel * vel, KL_MOVING: pos, KL_STEPWISE: vel}


def make_kl(options: Any, kind: str | None = None, params: dict[str, Any] | None = None) -> KLVariant:
    """The KL variant ``kind`` built from its own section: ``options`` holds the trust region's fields (the
    run config's ``TrustRegion`` section, train/config.py), ``params`` the plug-in parameters (``kl.*``,
    ``anchor.*``). The variant holds those, its name and nothing else of the run. Without ``kind`` and
    ``params`` both are read from ``options`` (a whole run config works too: tests, planning)."""
    kind = options.kl if kind is None else kind
    given = _params_of(options) if params is None else dict(params)
    fields = dataclasses.asdict(options) if dataclasses.is_dataclass(options) else dict(vars(options))
    return KL_VARIANTS.get(kind)(SimpleNamespace(**{**fields, "kl": kind, "params": given}))


def resolved_params(cfg: Any) -> dict[str, Any]:
    """Every ``kl.*`` and ``anchor.*`` parameter of the config's KL variant, defaults filled in.

    Raises a UserError naming the key for a value out of range or a key no component declares."""
    variant = make_kl(cfg)
    out = plugin_params.dump(variant.params, "kl")
    given = plugin_params.component(_params_of(cfg), "anchor")
    taken: set[str] = set()
    for policy in variant.anchor_policies().values():
        out.update(plugin_params.dump(policy.params, "anchor"))
        taken |= set(type(policy).Params.model_fields)
    stray = sorted(set(given) - taken)
    if stray:
        allowed = sorted(
            {f"anchor.{k}" for p in variant.anchor_policies().values() for k in type(p).Params.model_fields}
        )
        raise UserError(f"KL variant {cfg.kl!r} has no anchor parameter anchor.{stray[0]} (its anchors: "
                        f"{dict(variant.anchors) or 'none'}); allowed: {', '.join(allowed) or 'none'}")
    return out


# --- anchors ---------------------------------------------------------------------------------
class _Velocity(nn.Module):
    """Lets functional_call swap the trainable module's parameters while calling model.velocity."""

    def __init__(self, model: Any, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.__dict__["_model"] = model  # not a submodule: only `module`'s parameters are swapped

    def forward(self, x: Tensor, sigma: Tensor, cond: Any) -> Tensor:
        return self._model.velocity(x, sigma, cond)


class Anchors:
    """Snapshots of the trainable parameters, one per anchor, each refreshed by its update policy.

    ``policies``: anchor name -> AnchorPolicy (a KL variant's ``anchor_policies()``); a plain list of
    names gives anchors that are never updated (snapshots of the current policy)."""

    def __init__(self, policies: Mapping[str, AnchorPolicy] | Iterable[str], model: Any, module: nn.Module) -> None:
        if not isinstance(policies, Mapping):
            policies = {name: NeverUpdate() for name in policies}
        self.policies = dict(policies)
        self.names = tuple(self.policies)
        self.stored_names = tuple(a for a, p in self.policies.items() if not p.live)
        """Anchors whose mean the rollout stores (fixed within an update)."""
        self.live_names = tuple(a for a, p in self.policies.items() if p.live)
        """Anchors the loss evaluates itself (they change between an update's optimizer steps)."""
        self._call = _Velocity(model, module)
        self._module, self._model = module, model
        self._params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        # FSDP2-sharded parameters are DTensors: the snapshots are then sharded the same way.
        self._sharded = dtensors.is_sharded(self._params.values())
        self.snapshots: dict[str, dict[str, Tensor]] = {a: self._copy() for a in self.names}

    def _copy(self) -> dict[str, Tensor]:
        return {n: p.detach().clone() for n, p in self._params.items()}

    def velocity(self, name: str) -> Callable[[Tensor, Tensor, Any], Tensor]:
        """model.velocity with the trainable parameters replaced by the named snapshot."""
        if self._sharded:
            return lambda x, sigma, cond: self._sharded_velocity(name, x, sigma, cond)
        snap = {f"module.{n}": t for n, t in self.snapshots[name].items()}
        return lambda x, sigma, cond: functional_call(self._call, snap, (x, sigma, cond), strict=False)

    def _sharded_velocity(self, name: str, x: Tensor, sigma: Tensor, cond: Any) -> Tensor:
        # functional_call cannot replace FSDP-managed parameters (FSDP's pre-forward hook installs its
        # own all-gathered ones), so the snapshot's shards are copied into the parameters for the call
        # and the policy's copied back (under no_grad: an anchor never needs a gradient).
        with dtensors.swapped(self._module, self._params, self.snapshots[name]):
            return self._model.velocity(x, sigma, cond)

    @torch.no_grad()
    def before_optimizer_step(self) -> bool:
        """Let every anchor's policy see the parameters just before a step (local shards)."""
        policy = {n: dtensors.local(p.detach()) for n, p in self._params.items()}
        changed = False
        for name, rule in self.policies.items():
            snapshot = {n: dtensors.local(t) for n, t in self.snapshots[name].items()}
            changed |= bool(rule.before_step(snapshot, policy))
        return changed

    @torch.no_grad()
    def after_optimizer_step(self, optimizer_steps: int) -> bool:
        """Let every anchor's policy update its snapshot (local shards); True if any changed."""
        policy = {n: dtensors.local(p.detach()) for n, p in self._params.items()}
        changed = False
        for name, rule in self.policies.items():
            snapshot = {n: dtensors.local(t) for n, t in self.snapshots[name].items()}
            changed |= bool(rule.update(snapshot, policy, optimizer_steps))
        return changed

    def state_dict(self) -> dict[str, Any]:
        """Full tensors (gathered from the shards under FSDP2: every rank must call it)."""
        return {"snapshots": {a: {n: dtensors.full(t) for n, t in snap.items()} for a, snap in self.snapshots.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, snap in state["snapshots"].items():
            for n, t in snap.items():
                dtensors.load_into(self.snapshots[name][n], t)
