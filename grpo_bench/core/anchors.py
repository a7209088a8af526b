"""KL anchors (docs/design.md §4): snapshots of the trainable parameters and the policies that refresh them.

An anchor is a snapshot of the *trainable* parameters only, evaluated with
``torch.func.functional_call``. For full fine-tuning that is the whole net; for LoRA the initial
snapshot has B = 0, i.e. exactly "adapters disabled". One mechanism, no special cases. Each anchor has
a registered update policy (``ANCHOR_POLICIES``: never, every, ema, previous) saying when its snapshot
follows the policy; a *live* policy changes it between the optimizer steps of one update, so the loss
evaluates that anchor's mean itself instead of the rollout storing it. The KL variants that use anchors
are grpo_bench.core.trust_region.

Plug-in policies register with ``register_anchor_policy``; their own parameters are set as
``anchor.<key>`` (grpo_bench.params). A policy is built from the trust region's section (``AnchorOptions``:
the run config's ``TrustRegion``, config/sections.py) and its own parameters, and keeps only what it reads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor, nn
from torch.func import functional_call

from grpo_bench import params as plugin_params
from grpo_bench.core import dtensors
from grpo_bench.errors import UserError
from grpo_bench.params import NoParams, PluginParams
from grpo_bench.registry import Registry

ANCHOR_POLICIES: Registry[type[AnchorPolicy]] = Registry("anchor update policy")


def register_anchor_policy(name: str):
    """Class decorator: ``@register_anchor_policy("ema")`` on an ``AnchorPolicy`` subclass."""
    return ANCHOR_POLICIES.register(name)


# --- anchor update policies --------------------------------------------------------------------
class AnchorOptions(Protocol):
    """The settings every anchor policy may read: the run config's trust-region section (``TrustRegion``,
    config/sections.py) carries them; declared here so that the core names no run config."""

    anchor_every: int
    """Copy the policy into an 'every' anchor every N optimizer steps."""


class AnchorPolicy(ABC):
    """When and how an anchor snapshot follows the policy after an optimizer step.

    Parameters of its own go in a nested ``Params`` model, set as ``anchor.<key>=value``. ``options``
    (``AnchorOptions``: the trust region's section, or None for the defaults) holds the settings shared by all
    policies; a policy reads what it needs in ``__init__`` and keeps only that, never the section."""

    name: str
    Params: type[PluginParams] = NoParams
    live: ClassVar[bool] = False
    """True: the loss evaluates the anchor itself, at loss time (its snapshot changes within an update, as
    ``before_step`` makes it, or the loss needs it at inputs no rollout holds, as a re-noised sample);
    False: the rollout stores its mean once per update."""

    def __init__(self, options: AnchorOptions | None = None, **params: Any) -> None:
        self.params = plugin_params.parse(self.Params, params, "anchor", f"anchor policy {self.name!r}")

    def before_step(self, snapshot: dict[str, Tensor], policy: dict[str, Tensor]) -> bool:
        """Called before every optimizer step (after its backward); True if the snapshot changed."""
        return False

    @abstractmethod
    def update(self, snapshot: dict[str, Tensor], policy: dict[str, Tensor], optimizer_steps: int) -> bool:
        """Update ``snapshot`` in place from ``policy`` (same names; local shards) after optimizer step
        number ``optimizer_steps`` (1-based); True if it changed."""

    def after_update(self, snapshot: dict[str, Tensor], policy: dict[str, Tensor], optimizer_steps: int) -> bool:
        """Called once per update, after its last optimizer step (run total ``optimizer_steps``): a policy that
        follows the trained one once per rollout (an epoch of the official codes) updates here; True if the
        snapshot changed."""
        return False


@register_anchor_policy("never")
class NeverUpdate(AnchorPolicy):
    """The anchor stays the initial policy pi_0."""

    def update(self, snapshot, policy, optimizer_steps):
        return False


@register_anchor_policy("every")
class EveryN(AnchorPolicy):
    """Copy the policy into the anchor every N optimizer steps (N = the run's anchor_every)."""

    def __init__(self, options: AnchorOptions | None = None, **params: Any) -> None:
        super().__init__(options, **params)
        every = 10 if options is None else options.anchor_every  # None: TrustRegion's default
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise UserError(f"anchor policy 'every': trust_region key 'anchor_every' must be an integer >= 1, "
                            f"got {every!r}")
        self.every = every

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

    def __init__(self, options: AnchorOptions | None = None, **params: Any) -> None:
        super().__init__(options, **params)
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


def make_anchor_policy(name: str, options: AnchorOptions | None = None,
                       params: Mapping[str, Any] | None = None) -> AnchorPolicy:
    """A registered policy built from the trust region's section ``options`` (None: the defaults) and its
    parameters ``params``, keys without the ``anchor.`` prefix (None: none set).

    Keys no parameter of this policy declares are left to the other policies of the variant
    (``validate_params`` reports keys nobody takes)."""
    cls = ANCHOR_POLICIES.get(name)
    return cls(options, **{k: v for k, v in (params or {}).items() if k in cls.Params.model_fields})


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

    @torch.no_grad()
    def after_update(self, optimizer_steps: int) -> bool:
        """Let every anchor's policy update its snapshot once after an update's optimizer steps; True if any
        changed."""
        policy = {n: dtensors.local(p.detach()) for n, p in self._params.items()}
        changed = False
        for name, rule in self.policies.items():
            snapshot = {n: dtensors.local(t) for n, t in self.snapshots[name].items()}
            changed |= bool(rule.after_update(snapshot, policy, optimizer_steps))
        return changed

    def state_dict(self) -> dict[str, Any]:
        """Full tensors (gathered from the shards under FSDP2: every rank must call it)."""
        return {"snapshots": {a: {n: dtensors.full(t) for n, t in snap.items()} for a, snap in self.snapshots.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, snap in state["snapshots"].items():
            for n, t in snap.items():
                dtensors.load_into(self.snapshots[name][n], t)
