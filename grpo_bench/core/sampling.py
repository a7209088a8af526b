"""Drive a generator model through a sigma schedule with a step kernel (DESIGN.md §2).

Shared by ``grpo-bench sample``, pretraining's evaluation and the trainer's ODE evaluation, so
every place that "samples the model" means the same thing. Classifier-free guidance runs the
conditional and unconditional halves as one doubled batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.core.schedule import validate
from grpo_bench.core.sde import Kernel


def _cat_cond(model: Any, a: Any, b: Any) -> Any:
    cat = getattr(model, "cat_cond", None)
    return cat(a, b) if cat is not None else torch.cat([a, b], dim=0)


def guided_velocity(model: Any, x: Tensor, sigma: Tensor, cond: Any, null: Any, guidance: float) -> Tensor:
    """v = v_null + g * (v_cond - v_null) (plain v_cond when g == 1); x: Tensor[B, ...], sigma: Tensor[B]."""
    if guidance == 1.0:
        return model.velocity(x, sigma, cond)
    v = model.velocity(torch.cat([x, x]), torch.cat([sigma, sigma]), _cat_cond(model, cond, null))
    v_cond, v_null = v.chunk(2)
    return v_null + guidance * (v_cond - v_null)


@torch.no_grad()
def sample(
    model: Any,
    prompts: list[str],
    noise: Tensor,
    sigmas: Tensor,
    kernel: Kernel,
    guidance: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Final latents Tensor[B, *latent_shape] from initial noise Tensor[B, *latent_shape] at sigma = 1.

    Each step i draws x_{i+1} = mu + std * eps from ``kernel`` (eps from ``generator``; ODE steps
    draw nothing), so a fixed (noise, generator seed) gives a fixed result.
    """
    validate(sigmas)
    if noise.shape[0] != len(prompts):
        raise ValueError(f"noise has batch {noise.shape[0]} but {len(prompts)} prompts were given")
    cond = model.encode_prompts(prompts)
    null = model.null_cond(len(prompts)) if guidance != 1.0 else None
    x = noise.float()
    b = x.shape[0]
    for i in range(len(sigmas) - 1):
        sigma = torch.full((b,), float(sigmas[i]), dtype=torch.float32, device=x.device)
        v = guided_velocity(model, x, sigma, cond, null, guidance).float()
        mu, std = kernel.step(x, v, sigmas, i)
        if float(std) > 0:
            eps = torch.randn(
                x.shape, generator=generator, dtype=x.dtype, device="cpu" if generator is None else generator.device
            )
            x = mu + std * eps.to(x.device)
        else:
            x = mu
    return x
