"""Drive a generator model through a sigma schedule (docs/design.md §2): the one sampler and the one
classifier-free-guidance path.

``guided_velocity`` is the only guidance implementation: with guidance g > 1 it runs the
unconditional and conditional halves as ONE doubled batch, ordered (null, cond), and returns
v_null + g * (v_cond - v_null). The training rollout, the loss's recomputation, the trainer's
evaluation, pretraining's evaluation, the judge's base-sample data and ``grpo-bench sample`` all
call it, and all but the rollout (which also stores transitions for training) step with ``sample``.

Conditioning is a pytree: a Tensor, or a dict / list / tuple of them, batched along dim 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from grpo_bench.core.schedule import validate
from grpo_bench.core.sde import Kernel

VelocityFn = Callable[[Tensor, Tensor, Any], Tensor]


# --- conditioning pytrees ---------------------------------------------------------------------
def cat_cond(a: Any, b: Any) -> Any:
    """Concatenate two conditionings along the batch (a dict subclass keeps its type)."""
    if isinstance(a, Tensor):
        return torch.cat([a, b])
    if isinstance(a, dict):
        return type(a)({k: cat_cond(a[k], b[k]) for k in a})
    if isinstance(a, (list, tuple)):
        return type(a)(cat_cond(x, y) for x, y in zip(a, b))
    return a  # non-batched extras (None, flags) pass through


def index_cond(c: Any, rows: Tensor) -> Any:
    """Select batch rows of a conditioning."""
    if isinstance(c, Tensor):
        return c[rows.to(c.device)]
    if isinstance(c, dict):
        return type(c)({k: index_cond(v, rows) for k, v in c.items()})
    if isinstance(c, (list, tuple)):
        return type(c)(index_cond(v, rows) for v in c)
    return c


def guided_velocity(velocity: VelocityFn, x: Tensor, sigma: Tensor, cond: Any, null: Any, guidance: float) -> Tensor:
    """v for x: Tensor[b, ...] at sigma: Tensor[b]; with guidance != 1 ONE call on the doubled batch
    (null rows first): v_null + guidance * (v_cond - v_null)."""
    if guidance == 1.0:
        return velocity(x, sigma, cond)
    v = velocity(torch.cat([x, x]), torch.cat([sigma, sigma]), cat_cond(null, cond))
    v_null, v_cond = v.chunk(2)
    return v_null + guidance * (v_cond - v_null)


# --- the sampler --------------------------------------------------------------------------------
@torch.no_grad()
def sample(
    model: Any,
    prompts: list[str],
    noise: Tensor,
    sigmas: Tensor,
    kernel: Kernel,
    guidance: float = 1.0,
    generator: torch.Generator | None = None,
    chunk: int | None = None,
    decode: bool = False,
) -> Tensor:
    """Final latents Tensor[B, *latent_shape] (videos Tensor[B, 3, F, H, W] with ``decode``) from
    initial noise Tensor[B, *latent_shape] at sigma = 1.

    Each step i draws x_{i+1} = mu + std * eps from ``kernel`` (eps from ``generator``; ODE steps
    draw nothing), so a fixed (noise, generator seed) gives a fixed result. ``chunk`` rows are
    sampled (and decoded) at a time to bound memory; the result does not depend on it for the ODE.
    """
    validate(sigmas)
    if noise.shape[0] != len(prompts):
        raise ValueError(f"noise has batch {noise.shape[0]} but {len(prompts)} prompts were given")
    size = chunk or max(1, len(prompts))
    out = []
    for start in range(0, len(prompts), size):
        rows = prompts[start : start + size]
        x = _sample_rows(model, rows, noise[start : start + size], sigmas, kernel, guidance, generator)
        out.append(model.decode(x).float() if decode else x)
    return torch.cat(out)


def _sample_rows(model: Any, prompts: list[str], noise: Tensor, sigmas: Tensor, kernel: Kernel, guidance: float,
                 generator: torch.Generator | None) -> Tensor:
    cond = model.encode_prompts(prompts)
    null = model.null_cond(len(prompts)) if guidance != 1.0 else None
    x = noise.float()
    b = x.shape[0]
    for i in range(len(sigmas) - 1):
        sigma = torch.full((b,), float(sigmas[i]), dtype=torch.float32, device=x.device)
        v = guided_velocity(model.velocity, x, sigma, cond, null, guidance).float()
        mu, std = kernel.step(x, v, sigmas, i)
        if float(std) > 0:
            device = "cpu" if generator is None else generator.device
            eps = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=device)
            x = mu + std * eps.to(x.device)
        else:
            x = mu
    return x
