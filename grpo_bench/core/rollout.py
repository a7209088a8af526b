"""Batched group rollouts (docs/design.md §2–4): P prompts × G rollouts sampled together.

The one sampler (``integrate``, core/sampling.py: one batched model call per step, classifier-free guidance
as one doubled batch) over the method's ``StepTable``: its kernel at every SDE step, the ODE elsewhere.
At every *stored* step (the steps the method may train) the rollout keeps x_i, x_{i+1}, logp_old and
mu_old for all rows, and for each KL anchor mu_ref from one extra batched forward with the anchor's
parameters, run on the rows that train that step this update only (NaN elsewhere, so a misuse cannot pass silently).
Everything runs under no_grad. Training recomputes the transition mean with the same ``transition``, so on
the first inner update rho = exp(logp - logp_old) is exactly 1.

Rows are group-major: prompt p owns rows p*G .. p*G+G-1.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_bench.core.sampling import StepTable, VelocityFn, cat_cond, guided_velocity, index_cond, integrate, transition
from grpo_bench.core.sde import log_prob

__all__ = [
    "Rollout", "StepTable", "VelocityFn", "cat_cond", "derived_seed", "generator", "guided_velocity", "index_cond",
    "initial_noise", "rollout", "transition",
]


# --- seeds: every stream derives from (seed, stream name, index) alone ------------------------
def derived_seed(seed: int, stream: str, index: int = 0) -> int:
    """A 63-bit seed for one named random stream; independent of method and config."""
    digest = hashlib.sha256(f"{int(seed)}/{stream}/{int(index)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, stream: str, index: int = 0, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(derived_seed(seed, stream, index))


# --- the rollout -------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One update's P × G trajectories; per-step tensors are kept at the stored steps only."""

    prompts: list[str]  # [B] group-major
    cond: Any  # model conditioning of the B rows
    stored: Tensor  # Long[S] step indices kept (the method's eligible steps)
    slot: Tensor  # Long[T] step -> position in `stored` (-1 if not stored)
    x: Tensor  # [B, S, C, F, H, W] x_i
    x_next: Tensor  # [B, S, C, F, H, W] x_{i+1}
    logp_old: Tensor  # [B, S]
    mu_old: Tensor  # [B, S, C, F, H, W]
    mu_ref: dict[str, Tensor]  # anchor -> [B, S, C, F, H, W] (NaN where the row does not train the step)
    videos: Tensor  # [B, 3, F, H, W] decoded final samples
    final: Tensor | None = None  # [B, C, F, H, W] the final latents x_T (what a likelihood-free loss re-noises)
    noise: Tensor | None = None  # [B, S, C, F, H, W] fresh N(0, I) per stored step (``fresh_noise``), else None
    forward_rows: int = 0  # rows the rollout's velocity calls evaluated (guidance doubling and anchors included)


def initial_noise(shape: tuple[int, ...], prompts: int, group: int, shared: bool, gen: torch.Generator) -> Tensor:
    """x_0 ~ N(0, I): Tensor[P*G, *shape]; with `shared` every rollout of a group gets the same noise.

    Drawn as [P, G, ...] either way, so for one seed every method sees the same noise stream."""
    z = torch.randn(prompts, group, *shape, generator=gen, device=gen.device)
    if shared:
        z = z[:, :1].expand_as(z)
    return z.reshape(prompts * group, *shape).contiguous()


@torch.no_grad()
def rollout(
    model: Any,
    table: StepTable,
    rows: list[str],
    x0: Tensor,
    *,
    guidance: float,
    stored: Tensor,
    logprob: str,
    sde_gen: torch.Generator,
    anchors: dict[str, VelocityFn] | None = None,
    train_steps: Tensor | None = None,
    share_group: int = 0,
    fresh_noise: bool = False,
    guidance_formula: str = "cfg",
) -> Rollout:
    """Sample one trajectory per row (prompt text, group-major) from x0: Tensor[B, C, F, H, W].

    train_steps: Long[B, K], the steps each row trains this update (mu_ref is computed for those
    (row, step) pairs only); None computes mu_ref for every row at every stored step.
    share_group: G > 1 when the G rows of each group start from the same noise and share the ODE prefix
    before the table's first SDE step (a method's ``share_prefix``): that prefix runs once per group and
    branches at the first SDE step. fresh_noise: also draw N(0, I) per (row, stored step) from ``sde_gen``
    after the trajectory (a likelihood-free loss's forward-process noise). guidance_formula: how the guided
halves combine (core/sampling.py ``GUIDANCE_FORMULAS``)."""
    anchors = anchors or {}
    batch = len(rows)
    cond = model.encode_prompts(rows)
    null = model.null_cond(batch) if guidance != 1.0 else None
    steps_total = table.a.numel()
    slot = torch.full((steps_total,), -1, dtype=torch.long)
    slot[stored] = torch.arange(stored.numel())
    needs_ref = torch.zeros(batch, steps_total, dtype=torch.bool)  # [B, T]
    if train_steps is None:
        needs_ref[:, stored] = True
    else:
        needs_ref.scatter_(1, train_steps.cpu(), True)
    keep: dict[str, list[Tensor]] = {k: [] for k in ("x", "x_next", "logp", "mu", *(f"ref:{a}" for a in anchors))}

    def store(i: int, x: Tensor, x_next: Tensor, mu: Tensor, std: Tensor) -> None:
        if slot[i] >= 0:
            keep["x"].append(x)
            keep["x_next"].append(x_next)
            keep["logp"].append(log_prob(x_next, mu, std, logprob))
            keep["mu"].append(mu)

    factor = 2 if guidance != 1.0 else 1
    first_sde = int(table.sde.nonzero()[0]) if bool(table.sde.any()) else steps_total
    prefix = first_sde if share_group > 1 and bool((stored >= first_sde).all()) else 0
    if prefix:
        groups = x0.reshape(batch // share_group, share_group, *x0.shape[1:])
        if not torch.equal(groups, groups[:, :1].expand_as(groups)):
            raise ValueError("share_group: the rows of a group must start from the same noise")
        lead = torch.arange(0, batch, share_group, device=x0.device)
        x_mid = integrate(model.velocity, table, x0[lead], index_cond(cond, lead),
                          None if null is None else index_cond(null, lead), guidance, sde_gen, stop=prefix,
                          formula=guidance_formula)
        x = integrate(model.velocity, table, x_mid.repeat_interleave(share_group, 0), cond, null, guidance, sde_gen,
                      on_step=store, start=prefix, formula=guidance_formula)
    else:
        x = integrate(model.velocity, table, x0, cond, null, guidance, sde_gen, on_step=store, formula=guidance_formula)
    forward_rows = factor * (prefix * (batch // max(share_group, 1)) + (steps_total - prefix) * batch)
    noise = None
    if fresh_noise:
        device = "cpu" if sde_gen is None else sde_gen.device
        noise = torch.randn((batch, stored.numel(), *x.shape[1:]), generator=sde_gen, device=device).to(x.device)

    def stack(key: str) -> Tensor:
        return torch.stack(keep[key], dim=1)  # [B, S, ...]

    xs, mu_old = stack("x"), stack("mu")
    needs_ref[:, slot < 0] = False  # only stored steps are trained
    forward_rows += factor * int(needs_ref.sum()) * len(anchors)
    return Rollout(
        prompts=rows, cond=cond, stored=stored, slot=slot,
        x=xs, x_next=stack("x_next"), logp_old=stack("logp"), mu_old=mu_old,
        mu_ref={a: _anchor_means(v, table, xs, mu_old, slot, needs_ref, cond, null, guidance, guidance_formula)
                for a, v in anchors.items()},
        videos=model.decode(x).float(), final=x, noise=noise, forward_rows=forward_rows,
    )


def _anchor_means(velocity: VelocityFn, table: StepTable, xs: Tensor, mu_old: Tensor, slot: Tensor, needs_ref: Tensor,
                  cond: Any, null: Any, guidance: float, formula: str = "cfg") -> Tensor:
    """mu_ref [B, S, ...] of one anchor at the (row, step) pairs that train (NaN elsewhere), in one batched
    call after the rollout (larger batches run faster than one call per step, for the same values)."""
    ref = torch.full_like(mu_old, float("nan"))
    rows, steps = needs_ref.nonzero(as_tuple=True)  # pairs, row-major
    if rows.numel():
        rows, steps = rows.to(xs.device), steps.to(xs.device)
        at = slot.to(xs.device)[steps]
        x = xs[rows, at]
        c, n = index_cond(cond, rows), None if null is None else index_cond(null, rows)
        v_ref = guided_velocity(velocity, x, table.sigma[steps], c, n, guidance, formula=formula)
        ref[rows, at] = transition(table, steps, x, v_ref)[0]
    return ref
