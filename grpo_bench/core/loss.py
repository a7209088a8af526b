"""The GRPO policy loss with the gradient-norm equalizer and the KL penalty (docs/design.md §3–4).

Per trajectory j and trained step i:

    rho_ij = exp(logp_theta - logp_old)
    L_ij   = S_i * max(-A_j * rho_ij, -A_j * clip(rho_ij, 1-eps, 1+eps))
    loss   = mean_(j,i) L_ij + kl_weight * mean_(j,i) KL_ij

``step_terms`` evaluates one trained step for a chunk of b samples (each sample may sit at a
different step i, as with DanceGRPO's random step subsets) with one batched forward; the trainer
sums chunks × steps and divides by the number of (j, i) pairs (gradient accumulation).

Two declared hooks let a method change the loss without a branch here (docs/design.md §3a):

* an **objective** (``OBJECTIVES``, ``register_objective``) maps the per-step ratio inputs
  (``RatioInputs``: log-probs, advantages, the step's means, std and lambda) to (L_ij, rho_ij): the
  clipped surrogate above (``clipped``, every shipped method before 0.5), a normalised ratio, a mask;
* a **loss family** (``LOSS_FAMILIES``, ``register_loss_family``) replaces ``step_terms`` as a whole:
  ``policy_gradient`` (the above, core's own, which reads the stored transitions) or a plug-in's, one that
  needs no log-prob (a flow-matching loss on re-noised samples), which reads only the views of
  core/loss_views.py (``family_views`` builds them). A family returns the same ``StepTerms``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from grpo_bench.core import dtensors as sharding
from grpo_bench.core.loss_views import LossSamples, LossVelocities
from grpo_bench.core.rollout import Rollout, StepTable, transition
from grpo_bench.core.sampling import guided_velocity, index_cond
from grpo_bench.core.sde import log_prob
from grpo_bench.core.trust_region import KLInputs, KLVariant
from grpo_bench.registry import Registry


def clipped_policy_loss(
    logp: Tensor, logp_old: Tensor, adv: Tensor, weight: Tensor, clip_range: float
) -> tuple[Tensor, Tensor]:
    """(L: Tensor[b], rho: Tensor[b]) for logp, logp_old, adv, weight: Tensor[b]."""
    ratio = torch.exp(logp - logp_old)  # [b]; exactly 1 on the first inner update
    unclipped = -adv * ratio  # [b]
    clipped = -adv * ratio.clamp(1 - clip_range, 1 + clip_range)  # [b]
    return weight * torch.maximum(unclipped, clipped), ratio  # pessimistic (PPO) bound, S_i-weighted


@dataclass(frozen=True)
class RatioInputs:
    """What a per-step objective may read for b samples, each at one trained step (core builds it; read-only)."""

    logp: Tensor  # [b] the policy's log-prob of x_next (with grad)
    logp_old: Tensor  # [b] the rollout's
    adv: Tensor  # [b] advantages
    weight: Tensor  # [b] the equalizer S_i (ones when off)
    clip_range: float
    mu: Tensor  # [b, C, F, H, W] the policy's mean (with grad)
    mu_old: Tensor  # [b, C, F, H, W] the rollout's mean
    std: Tensor  # [b] the step's std (float32)
    lam: Tensor  # [b] |d mu / d v| of the step (|b_i| of the table)
    table_std: Tensor  # [T] every step's std (0 at ODE steps): for weights normalised over the schedule
    steps: Tensor | None = None  # [b] each sample's step index (objectives that pool the samples of one step)
    delta: Tensor | None = None  # [b] each sample's step Delta = sigma - sigma'


Objective = Callable[[RatioInputs, Any], "tuple[Tensor, Tensor]"]
OBJECTIVES: Registry[Objective] = Registry("policy objective")
LOSS_FAMILIES: Registry[Callable[..., StepTerms]] = Registry("loss family")


def register_objective(name: str):
    """Function decorator: ``@register_objective("kl_mask")`` on ``f(inp: RatioInputs, params) -> (L[b], rho[b])``;
    ``params`` are the method's own (``method.*``)."""
    return OBJECTIVES.register(name)


def register_loss_family(name: str, needs_logprob: bool = True):
    """Function decorator: ``@register_loss_family("nft", needs_logprob=False)`` on ``f(samples: LossSamples,
    velocity: LossVelocities, params) -> StepTerms`` (core/loss_views.py: what a family may read; ``params``: the
    method's own, ``method.*``); ``needs_logprob=False`` marks a family whose trained steps need not be stochastic.
    ``f`` is returned as it is (a test may call it with views of its own); the registry holds core's call of it."""

    def decorator(fn):
        @functools.wraps(fn)
        def family(ctx: LossContext, ro: Rollout, adv: Tensor, rows: Tensor, steps: Tensor) -> StepTerms:
            samples, velocity = family_views(ctx, ro, adv, rows, steps)
            return fn(samples, velocity, ctx.method_params)

        _register_family(name, needs_logprob, family)
        return fn

    return decorator


def _register_family(name: str, needs_logprob: bool, family: Callable[..., StepTerms]) -> None:
    """``family(ctx, ro, adv, rows, steps)`` under ``name``: core's own families read its records directly."""
    family.needs_logprob = needs_logprob  # type: ignore[attr-defined]
    LOSS_FAMILIES.register(name)(family)


@register_objective("clipped")
def clipped_objective(inp: RatioInputs, params: Any = None) -> tuple[Tensor, Tensor]:
    """The PPO clipped surrogate S_i * max(-A rho, -A clip(rho, 1-eps, 1+eps))."""
    return clipped_policy_loss(inp.logp, inp.logp_old, inp.adv, inp.weight, inp.clip_range)


@dataclass
class StepTerms:
    policy: Tensor  # [b] S_i * clipped objective (with grad)
    kl: dict[str, Tensor]  # 'kl' (the penalty) and named parts, each [b] (with grad)
    ratio: Tensor  # [b]
    forward_rows: int = 0  # rows the model evaluated for these terms (grad and no-grad forwards)
    logp_gap: Tensor | None = None
    """[b] |logp - logp_old| (detached): at the rollout's parameters it measures train-inference consistency
    (bf16, guidance, batch shape); None for a family that computes no log-prob."""


@dataclass
class LossContext:
    """What the loss needs besides the rollout: fixed for a whole run."""

    model: Any
    table: StepTable
    weight: Tensor  # [T] equalizer S_i (ones when off)
    kl: KLVariant
    clip_range: float
    logprob: str
    guidance: float
    live_anchors: Mapping[str, Callable[..., Tensor]] = field(default_factory=dict)
    """Anchor name -> velocity with the anchor's parameters, for anchors that change within an
    update (``Anchors.live_names``): their mean is evaluated here, at loss time, under no_grad."""
    objective: str = "clipped"
    """The method's registered per-step objective (``OBJECTIVES``)."""
    family: str = "policy_gradient"
    """The method's registered loss family (``LOSS_FAMILIES``)."""
    method_params: Any = None
    """The method's own parameters (``method.*``), passed to its objective and family."""
    objective_is_methods: bool = True
    """The objective is the method's own, so it reads ``method_params``; one a run chose for another method reads
    its own defaults (None): another method's parameters are not its."""
    method_anchors: tuple[str, ...] = ()
    """Live anchors the method's family reads itself (left out of the KL inputs)."""
    detach_uncond: bool = False
    """Under guidance, no gradient through the unconditional half (FlowGRPO's training forward)."""
    guidance_formula: str = "cfg"
    """How the guided halves combine (core/sampling.py ``GUIDANCE_FORMULAS``), as in the rollout."""

    def hooks(self) -> tuple[Objective, Callable[..., StepTerms]]:
        """(objective, family) resolved once per context."""
        cached = self.__dict__.get("_hooks")
        if cached is None:
            cached = (OBJECTIVES.get(self.objective), LOSS_FAMILIES.get(self.family))
            self.__dict__["_hooks"] = cached
        return cached


def step_terms(ctx: LossContext, ro: Rollout, adv: Tensor, rows: Tensor, steps: Tensor) -> StepTerms:
    """Loss terms of b samples `rows`: Long[b], each at its trained step `steps`: Long[b] (the method's
    loss family; ``policy_gradient`` by default)."""
    return ctx.hooks()[1](ctx, ro, adv, rows, steps)


def family_views(ctx: LossContext, ro: Rollout, adv: Tensor, rows: Tensor,
                 steps: Tensor) -> tuple[LossSamples, LossVelocities]:
    """What a plug-in loss family reads of b samples `rows`, each at its step `steps`: the samples and the
    velocity calls at them (the policy's and the method's own live anchors', guided as the rollout was)."""
    slot = ro.slot[steps.cpu()].to(ro.final.device)  # [b] position of each sample's step in the rollout store
    samples = LossSamples(final=ro.final[rows], noise=None if ro.noise is None else ro.noise[rows, slot],
                          sigma=ctx.table.sigma[steps], advantages=adv[rows], weight=ctx.weight[steps])
    null = ctx.model.null_cond(len(rows)) if ctx.guidance != 1.0 else None
    own = {a: ctx.live_anchors[a] for a in ctx.method_anchors if a in ctx.live_anchors}
    velocity = LossVelocities.guided(ctx.model.velocity, own, index_cond(ro.cond, rows), null, ctx.guidance,
                                     ctx.guidance_formula, ctx.detach_uncond)
    return samples, velocity


def policy_gradient_terms(ctx: LossContext, ro: Rollout, adv: Tensor, rows: Tensor, steps: Tensor) -> StepTerms:
    """The GRPO terms: the objective on rho = exp(logp - logp_old) at the stored transition, and the KL."""
    slot = ro.slot[steps.cpu()].to(ro.x.device)  # [b] position of each sample's step in the rollout store
    x, x_next = ro.x[rows, slot], ro.x_next[rows, slot]  # [b, C, F, H, W]
    cond = index_cond(ro.cond, rows)
    null = ctx.model.null_cond(len(rows)) if ctx.guidance != 1.0 else None
    v = guided_velocity(ctx.model.velocity, x, ctx.table.sigma[steps], cond, null, ctx.guidance,
                        ctx.detach_uncond, ctx.guidance_formula)  # one call
    mu, std = transition(ctx.table, steps, x, v)  # same function as the rollout: rho == 1 at first
    logp = log_prob(x_next, mu, std, ctx.logprob)  # [b]
    logp_old = ro.logp_old[rows, slot]  # [b]
    mu_old = ro.mu_old[rows, slot]
    objective = ctx.hooks()[0]
    policy, ratio = objective(RatioInputs(logp, logp_old, adv[rows], ctx.weight[steps], ctx.clip_range, mu, mu_old,
                                          std.flatten(), ctx.table.b[steps].abs(), ctx.table.std, steps,
                                          None if ctx.table.delta is None else ctx.table.delta[steps]),
                                ctx.method_params if ctx.objective_is_methods else None)
    mu_ref = {a: ref[rows, slot] for a, ref in ro.mu_ref.items()}  # stored by the rollout
    with torch.no_grad():
        for a, velocity in ctx.live_anchors.items():
            if a in ctx.method_anchors:
                continue
            v_ref = guided_velocity(velocity, x, ctx.table.sigma[steps], cond, null, ctx.guidance,
                                    formula=ctx.guidance_formula)
            mu_ref[a] = transition(ctx.table, steps, x, v_ref)[0]  # [b, C, F, H, W]
    kl = ctx.kl(KLInputs(mu=mu, logp=logp, logp_old=logp_old, mu_old=mu_old, mu_ref=mu_ref,
                         var=std.flatten() ** 2, delta=None if ctx.table.delta is None else ctx.table.delta[steps]))
    factor = 2 if ctx.guidance != 1.0 else 1
    live = sum(a not in ctx.method_anchors for a in ctx.live_anchors)
    return StepTerms(policy, kl, ratio.detach(), forward_rows=factor * len(rows) * (1 + live),
                     logp_gap=(logp - logp_old).detach().abs())


_register_family("policy_gradient", True, policy_gradient_terms)


def per_step_grad_norms(
    ctx: LossContext, ro: Rollout, adv: Tensor, params: list[Tensor], steps_total: int, micro_batch: int = 0,
    group: Any = None,
) -> list[float | None]:
    """Measured |grad L_i| for each stored step i: one backward per step over the whole batch.

    L_i = mean_j S_i * L_ij (the policy loss the method optimises at that step, KL excluded);
    None for steps the method never trains. Gradients go to a side buffer (autograd.grad), so
    the optimizer's accumulated .grad is untouched; with several plain processes each measures
    its own rows.

    FSDP2-sharded parameters (DTensors) cannot be reached by autograd.grad (the forward ran on FSDP's
    all-gathered copies), so there each step backpropagates into .grad, which FSDP reduce-scatters
    (the norm is then that of the whole batch's gradient, over all ranks), and the gradients are
    cleared afterwards: call it only where no accumulated gradient is wanted (the trainer does,
    before its optimizer steps, which start with zero_grad).

    micro_batch > 0: the batch mean is accumulated over chunks of that many rows (each chunk's sum
    divided by the batch size), so one forward+backward holds at most micro_batch rows; the norm is
    that of the same gradient.

    ``group``: a sequence-parallel process group (models/sequence_parallel.py) whose processes each hold a
    partial gradient of the same rows; the partial gradients are summed over it before the norm."""
    out: list[float | None] = [None] * steps_total
    rows = torch.arange(ro.x.shape[0], device=ro.x.device)
    sharded = sharding.is_sharded(params)
    chunks = rows.split(micro_batch) if micro_batch > 0 else (rows,)
    n = rows.numel()
    for i in ro.stored.tolist():
        if sharded:
            for p in params:
                p.grad = None
            for chunk in chunks:
                step_terms(ctx, ro, adv, chunk, torch.full_like(chunk, i)).policy.sum().div(n).backward()
            # FSDP averaged over every process; a sequence-parallel group's partial gradients want the sum
            out[i] = sharding.grad_norm(params) * (torch.distributed.get_world_size(group) if group is not None else 1)
            for p in params:
                p.grad = None
            continue
        total: list[Tensor | None] = [None] * len(params)
        for chunk in chunks:
            loss = step_terms(ctx, ro, adv, chunk, torch.full_like(chunk, i)).policy.sum() / n
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            total = [g if t is None else (t if g is None else t + g) for t, g in zip(total, grads)]
        if group is not None:  # the same parameters are reached on every process of the group
            flat = torch.cat([g.float().flatten() for g in total if g is not None])
            torch.distributed.all_reduce(flat, group=group)
            total = [flat]
        out[i] = sum(float(g.float().pow(2).sum()) for g in total if g is not None) ** 0.5
    return out
