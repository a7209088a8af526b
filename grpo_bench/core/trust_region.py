"""Trust regions (docs/design.md §4): the KL variants, each a per-sample estimate against its anchors.

For Gaussian steps of equal variance the per-step KL is analytic,
``KL(pi_theta || pi_ref) = mean_e[(mu_theta - mu_ref)^2] / (2 var)``. An anchored variant needs
mu_ref, the anchor policy's mean at the stored transition; the rollout computes it under no_grad
(one extra batched forward per stored step per anchor), so training needs no extra forward.

A KL variant names its anchors and, per anchor, a registered update policy; the snapshots and
their policies are grpo_bench.core.anchors:

    variant    reference                         anchors (policy)      estimator
    none       -                                 -                     -
    fixed      pi_0                              initial (never)       analytic
    flow_grpo  pi_0                              initial (never)       analytic / (std^2/Delta): FlowGRPO's code
    stepwise   pi_{k-1} (the rollout policy)     -                     sample: logp_old - logp (or analytic on mu_old)
      (stepwise_ref: previous)  the policy before the last optimizer step   previous (previous, live)   analytic
    moving     pi_{k-N}                          moving (every)        analytic
    dual       beta_pos * moving + beta_vel * stepwise

A *live* anchor (its policy's ``live = True``) changes between the optimizer steps of one update, so
its mean is evaluated at loss time (one extra no-grad forward per trained step) instead of stored
by the rollout.

The KL weight (constant or adaptive) is ``grpo_bench.core.kl_weight``.

Plug-in KL variants register with ``register_kl``; their own parameters are set as ``kl.<key>``
(grpo_bench.params).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from grpo_bench import params as plugin_params
from grpo_bench.core.anchors import AnchorPolicy, make_anchor_policy
from grpo_bench.errors import UserError
from grpo_bench.params import NoParams, PluginParams
from grpo_bench.registry import Registry

KL_VARIANTS: Registry[type[KLVariant]] = Registry("KL variant")
KL = "kl"
"""The penalty every KL variant returns (and its metric name); other keys are named parts, logged only."""
KL_MOVING, KL_STEPWISE = "kl_moving", "kl_stepwise"
"""The dual variant's parts: the moving-anchor (position) and stepwise (velocity) KL."""


def register_kl(name: str):
    """Class decorator: ``@register_kl("dual")`` on a ``KLVariant`` subclass."""
    return KL_VARIANTS.register(name)


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
    delta: Tensor | None = None  # [b] the step's Delta = sigma - sigma' (FlowGRPO's estimator)


class KLOptions(Protocol):
    """What a KL variant is built from: the run config's trust-region section (``TrustRegion``,
    config/sections.py) with the variant's name (``kl``) and the plug-in parameters (``params``: ``kl.*``,
    ``anchor.*``), as ``make_kl`` assembles it; declared here so that the core names no run config. The
    anchor policies read their part (``AnchorOptions``)."""

    kl: str | None
    params: Mapping[str, Any]
    beta_pos: float
    beta_vel: float
    anchor_every: int
    stepwise_estimator: str
    stepwise_ref: str


TRUST_REGION_KEYS: tuple[str, ...] = tuple(k for k in KLOptions.__annotations__ if k not in ("kl", "params"))
"""The trust region's settings a variant keeps besides its name and parameters: ``make_kl`` takes exactly these of
whatever it is given."""


class KLVariant(ABC):
    """A KL trust region: which anchors it needs (each with its update policy) and its per-sample estimate.

    Parameters of its own go in a nested ``Params`` model, set as ``kl.<key>=value`` and read as
    ``self.params.<key>``."""

    name: str
    anchors: ClassVar[Mapping[str, str]] = {}
    """Anchor name -> registered update policy; the rollout computes each anchor's mu_ref."""
    Params: type[PluginParams] = NoParams

    def __init__(self, options: KLOptions) -> None:
        self.cfg = options  # the section it was built from: read while building (anchors), never at loss time
        given = plugin_params.component(plugin_params.of_config(options), "kl")
        self.params = plugin_params.parse(self.Params, given, "kl", f"KL variant {self.name!r}")

    def anchor_policies(self) -> dict[str, AnchorPolicy]:
        """Anchor name -> its update policy, built from the run config."""
        own = plugin_params.component(plugin_params.of_config(self.cfg), "anchor")
        return {anchor: make_anchor_policy(policy, self.cfg, own) for anchor, policy in self.anchors.items()}

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


@register_kl("flow_grpo")
class FlowGRPOKL(KLVariant):
    """KL to pi_0 as FlowGRPO's code computes it: mean_e[(mu - mu_ref)^2] / (2 std_dev_t^2), where std_dev_t is
    the kernel's noise per unit time (std_dev_t^2 = var / Delta; for the flow kernel a^2 sigma/(1-sigma)), not the
    transition's std: yifan123/flow_grpo@9745241 scripts/train_sd3.py:900 (``kl_loss = ((prev_sample_mean -
    prev_sample_mean_ref) ** 2).mean(dim=(1, 2, 3), keepdim=True) / (2 * std_dev_t ** 2)``) with std_dev_t from
    flow_grpo/diffusers_patch/sd3_sde_with_logprob.py:50 (``std_dev_t = sqrt(sigma / (1 - sigma)) * noise_level``,
    before the ``* sqrt(-dt)`` of the step). It equals ``fixed`` times Delta: at one weight, ``fixed`` is 1/Delta
    (5-96x on the world's schedules) stronger."""

    anchors = {"initial": "never"}

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        if inp.delta is None:
            raise UserError("KL variant 'flow_grpo' needs each step's Delta (StepTable.delta)")
        return {KL: analytic_kl(inp.mu, inp.mu_ref["initial"], inp.var / inp.delta)}


@register_kl("stepwise")
class StepwiseKL(KLVariant):
    """KL to the rollout policy pi_{k-1}: sample estimate mean(logp_old - logp) (docs/design.md §4).

    With ``stepwise_ref: previous`` the reference is instead the policy before the last optimizer
    step (a live ``previous`` anchor), analytic: a KL between consecutive iterates."""

    def __init__(self, options: KLOptions) -> None:
        super().__init__(options)
        if getattr(options, "stepwise_ref", "rollout") == "previous":
            self.anchors = {"previous": "previous"}
        self.estimator = str(getattr(options, "stepwise_estimator", "sample"))

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        if "previous" in self.anchors:
            return {KL: analytic_kl(inp.mu, inp.mu_ref["previous"], inp.var)}
        if self.estimator == "analytic":
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

    def __init__(self, options: KLOptions) -> None:
        super().__init__(options)
        self.position, self.velocity = MovingKL(options), StepwiseKL(options)
        self.anchors = {**self.position.anchors, **self.velocity.anchors}
        self.beta_pos, self.beta_vel = options.beta_pos, options.beta_vel

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        pos, vel = self.position(inp)[KL], self.velocity(inp)[KL]
        return {KL: self.beta_pos * pos + self.beta_vel * vel, KL_MOVING: pos, KL_STEPWISE: vel}


def make_kl(options: KLOptions, kind: str | None = None, params: dict[str, Any] | None = None) -> KLVariant:
    """The KL variant ``kind`` built from its own section: ``options`` holds the trust region's fields (the
    run config's ``TrustRegion`` section, config/sections.py), ``params`` the plug-in parameters (``kl.*``,
    ``anchor.*``). The variant holds those (``TRUST_REGION_KEYS``), its name and nothing else of the run, whatever
    ``options`` carries besides. Without ``kind`` and ``params`` both are read from ``options`` (given, they need
    not be there: a trust-region section); a whole run config works too, for tests and planning."""
    kind = options.kl if kind is None else kind
    given = plugin_params.of_config(options) if params is None else dict(params)
    own = {key: getattr(options, key) for key in TRUST_REGION_KEYS}
    return KL_VARIANTS.get(kind)(SimpleNamespace(**own, kl=kind, params=given))


def resolved_params(options: Any, kind: str | None = None, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every ``kl.*`` and ``anchor.*`` parameter of the KL variant ``kind`` (``options.kl`` without it) given the
    plug-in parameters ``params`` (``options.params`` without them), defaults filled in: ``options`` is the
    trust-region section (``make_kl``'s, config/run.py ``_plugin_params``).

    Raises a UserError naming the key for a value out of range or a key no component declares."""
    kind = options.kl if kind is None else kind
    given_params = plugin_params.of_config(options) if params is None else dict(params)
    variant = make_kl(options, kind, given_params)
    out = plugin_params.dump(variant.params, "kl")
    given = plugin_params.component(given_params, "anchor")
    taken: set[str] = set()
    for policy in variant.anchor_policies().values():
        out.update(plugin_params.dump(policy.params, "anchor"))
        taken |= set(type(policy).Params.model_fields)
    stray = sorted(set(given) - taken)
    if stray:
        allowed = sorted(
            {f"anchor.{k}" for p in variant.anchor_policies().values() for k in type(p).Params.model_fields}
        )
        raise UserError(f"KL variant {kind!r} has no anchor parameter anchor.{stray[0]} (its anchors: "
                        f"{dict(variant.anchors) or 'none'}); allowed: {', '.join(allowed) or 'none'}")
    return out
