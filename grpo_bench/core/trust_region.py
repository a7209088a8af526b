"""Trust regions (DESIGN.md §4): KL anchors, the five KL variants, and the KL weight.

For Gaussian steps of equal variance the per-step KL is analytic,
``KL(pi_theta || pi_ref) = mean_e[(mu_theta - mu_ref)^2] / (2 var)``. An anchored variant needs
mu_ref, the anchor policy's mean at the stored transition; the rollout computes it under no_grad
(one extra batched forward per stored step per anchor), so training needs no extra forward.

Anchors are snapshots of the *trainable* parameters only, evaluated with
``torch.func.functional_call``. For full fine-tuning that is the whole net; for LoRA the initial
snapshot has B = 0, i.e. exactly "adapters disabled". One mechanism, no special cases.

    variant    reference                         estimator
    none       -                                 -
    fixed      pi_0 (anchor 'initial')           analytic
    stepwise   pi_{k-1} (the rollout policy)     sample: logp_old - logp (or analytic on mu_old)
    moving     pi_{k-N} (anchor 'moving')        analytic
    dual       beta_pos * moving + beta_vel * stepwise
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.func import functional_call

from grpo_bench.registry import Registry
from grpo_bench.train import sharding

KL_VARIANTS: Registry[type[KLVariant]] = Registry("KL variant")


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
    """A KL trust region: which anchors it needs and its per-sample estimate."""

    anchors: ClassVar[tuple[str, ...]] = ()
    """Parameter snapshots whose mu_ref the rollout must compute."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    @abstractmethod
    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        """{'kl': Tensor[b], ...named parts}: the penalty per sample (parts are for logging)."""


@KL_VARIANTS.register("none")
class NoKL(KLVariant):
    """No trust region."""

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        return {"kl": torch.zeros_like(inp.logp)}


@KL_VARIANTS.register("fixed")
class FixedKL(KLVariant):
    """KL to the initial policy pi_0 (FlowGRPO)."""

    anchors = ("initial",)

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        return {"kl": analytic_kl(inp.mu, inp.mu_ref["initial"], inp.var)}


@KL_VARIANTS.register("stepwise")
class StepwiseKL(KLVariant):
    """KL to the rollout policy pi_{k-1}: sample estimate mean(logp_old - logp) (seed eq. 15)."""

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        if self.cfg.stepwise_estimator == "analytic":
            return {"kl": analytic_kl(inp.mu, inp.mu_old, inp.var)}
        return {"kl": inp.logp_old - inp.logp}


@KL_VARIANTS.register("moving")
class MovingKL(KLVariant):
    """KL to a moving anchor pi_{k-N}, copied from the policy every N optimizer steps."""

    anchors = ("moving",)

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        return {"kl": analytic_kl(inp.mu, inp.mu_ref["moving"], inp.var)}


@KL_VARIANTS.register("dual")
class DualKL(KLVariant):
    """SAGE-GRPO's position-velocity controller: beta_pos * moving + beta_vel * stepwise."""

    anchors = ("moving",)

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.position, self.velocity = MovingKL(cfg), StepwiseKL(cfg)

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        pos, vel = self.position(inp)["kl"], self.velocity(inp)["kl"]
        return {"kl": self.cfg.beta_pos * pos + self.cfg.beta_vel * vel, "kl_moving": pos, "kl_stepwise": vel}


def make_kl(cfg: Any) -> KLVariant:
    return KL_VARIANTS.get(cfg.kl)(cfg)


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
    """Snapshots of the trainable parameters ('initial', 'moving') and their velocity functions."""

    def __init__(self, names: Iterable[str], model: Any, module: nn.Module, every: int) -> None:
        self.names = tuple(names)
        self.every = every
        self._call = _Velocity(model, module)
        self._module, self._model = module, model
        self._params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        # FSDP2-sharded parameters are DTensors: the snapshots are then sharded the same way.
        self._sharded = sharding.is_sharded(self._params.values())
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
        with sharding.swapped(self._module, self._params, self.snapshots[name]):
            return self._model.velocity(x, sigma, cond)

    def after_optimizer_step(self, optimizer_steps: int) -> bool:
        """Copy the policy into the moving anchor every `every` optimizer steps; True if copied."""
        if "moving" in self.snapshots and optimizer_steps % self.every == 0:
            for n, p in self._params.items():
                sharding.local(self.snapshots["moving"][n]).copy_(sharding.local(p.detach()))
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        """Full tensors (gathered from the shards under FSDP2: every rank must call it)."""
        return {"snapshots": {a: {n: sharding.full(t) for n, t in snap.items()} for a, snap in self.snapshots.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, snap in state["snapshots"].items():
            for n, t in snap.items():
                sharding.load_into(self.snapshots[name][n], t)


# --- the KL weight ---------------------------------------------------------------------------
@dataclass
class ConstantKLWeight:
    """A fixed KL weight (cfg.kl_weight)."""

    value: float

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
    """

    beta_min: float
    beta_max: float
    warmup: int
    target: float
    window: int = 10
    max_factor: float = 2.0
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
        if self.updates <= self.warmup:
            self.value = self._warmup_value(self.updates)
            return
        ratio = sum(self.history) / len(self.history) / self.target
        factor = 1.0
        if ratio > 1.5:
            factor = min(ratio, self.max_factor)
        elif ratio < 0.5:
            factor = max(ratio, 1.0 / self.max_factor)
        self.value = min(max(self.value * factor, self.beta_min), self.beta_max)

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "value": self.value, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates, self.value = int(state["updates"]), float(state["value"])
        self.history = deque(state["history"])


def make_kl_weight(cfg: Any) -> ConstantKLWeight | AdaptiveKLWeight:
    if cfg.kl_adaptive:
        return AdaptiveKLWeight(cfg.kl_beta_min, cfg.kl_beta_max, cfg.kl_warmup, cfg.kl_target, cfg.kl_window)
    return ConstantKLWeight(cfg.kl_weight)
