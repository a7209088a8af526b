"""Drive a generator model through a sigma schedule (docs/design.md §2): the one sampler, its one step
function and the one classifier-free-guidance path.

``guided_velocity`` is the only guidance implementation: with guidance g > 1 it runs the
unconditional and conditional halves as ONE doubled batch, ordered (null, cond), and combines them by a
registered formula (``GUIDANCE_FORMULAS``: ``cfg`` v_null + g * (v_cond - v_null), or Qwen-Image's
``norm_rescaled``). ``transition`` is the only step arithmetic (mu = a_i x + b_i v from a
``StepTable`` of float32 per-step scalars) and ``integrate`` the only loop: the training rollout (which
stores transitions through its ``on_step`` hook), the loss's recomputation (``transition`` alone), the
trainer's evaluation, pretraining's evaluation, the judge's base-sample data and ``grpo-bench sample``
(through ``sample``) all step with them, so a kernel has one arithmetic path wherever it runs.

Conditioning is a pytree: a Tensor, or a dict / list / tuple of them, batched along dim 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_bench.core.schedule import validate
from grpo_bench.core.sde import Kernel, ODEKernel
from grpo_bench.errors import UserError
from grpo_bench.registry import Registry

VelocityFn = Callable[[Tensor, Tensor, Any], Tensor]
StepHook = Callable[[int, Tensor, Tensor, Tensor, Tensor], None]
"""on_step(i, x_i, x_next, mu, std): what a caller keeps of step i (the rollout: its stored steps)."""


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


GuidanceFormula = Callable[[Tensor, Tensor, float], Tensor]
GUIDANCE_FORMULAS: Registry[GuidanceFormula] = Registry("guidance formula")
"""How the unconditional and conditional velocities combine under guidance g: f(v_null, v_cond, g) -> v."""


@GUIDANCE_FORMULAS.register("cfg")
def plain_cfg(v_null: Tensor, v_cond: Tensor, guidance: float) -> Tensor:
    """Classifier-free guidance: v_null + g (v_cond - v_null) (SD3, Wan, HunyuanVideo pipelines)."""
    return v_null + guidance * (v_cond - v_null)


@GUIDANCE_FORMULAS.register("norm_rescaled")
def norm_rescaled_cfg(v_null: Tensor, v_cond: Tensor, guidance: float) -> Tensor:
    """QwenImagePipeline's true CFG (diffusers 0.42.1 pipeline_qwenimage.py:668-672): the plain combination
    rescaled, per transformer token, to the conditional prediction's norm. A token is a 2 x 2 latent patch of
    one frame across every channel (``_pack_latents``), so v: [b, C, F, H, W] with even H and W."""
    comb = plain_cfg(v_null, v_cond, guidance)
    b, c, f, h, w = comb.shape
    if h % 2 or w % 2:
        raise UserError(f"guidance_formula 'norm_rescaled' rescales 2 x 2 latent patches; the latents are {h} x {w}")

    def tokens(v: Tensor) -> Tensor:
        return v.reshape(b, c, f, h // 2, 2, w // 2, 2)

    def norm(v: Tensor) -> Tensor:  # [b, 1, F, H/2, 1, W/2, 1]: one norm per token
        return torch.linalg.vector_norm(tokens(v), dim=(1, 4, 6), keepdim=True)

    return (tokens(comb) * (norm(v_cond) / norm(comb))).reshape(comb.shape)


def guided_velocity(velocity: VelocityFn, x: Tensor, sigma: Tensor, cond: Any, null: Any, guidance: float,
                    detach_null: bool = False, formula: str = "cfg") -> Tensor:
    """v for x: Tensor[b, ...] at sigma: Tensor[b]; with guidance != 1 ONE call on the doubled batch
    (null rows first), combined by the registered ``formula`` (``cfg``: v_null + guidance * (v_cond - v_null)).
    ``detach_null``: no gradient through v_null (FlowGRPO's training forward); the value is the same."""
    if guidance == 1.0:
        return velocity(x, sigma, cond)
    v = velocity(torch.cat([x, x]), torch.cat([sigma, sigma]), cat_cond(null, cond))
    v_null, v_cond = v.chunk(2)
    if detach_null:
        v_null = v_null.detach()
    return GUIDANCE_FORMULAS.get(formula, where="guidance_formula: ")(v_null, v_cond, guidance)


# --- the per-step Gaussian kernel, shared by rollout, training, evaluation and sampling --------
@dataclass
class StepTable:
    """Per-step kernel scalars as float32 tensors [T]: mu = a*x + b*v, std (0 at deterministic steps)."""

    sigma: Tensor  # [T] sigma_i
    a: Tensor  # [T] mu = a*x + b*v
    b: Tensor  # [T]
    std: Tensor  # [T] 0 at deterministic steps
    sde: Tensor  # bool [T] the steps that draw noise
    delta: Tensor | None = None  # [T] sigma_i - sigma_{i+1} (FlowGRPO's KL divides by std^2 / Delta)

    @classmethod
    def build(cls, method: Any, sigmas: Tensor, device: torch.device | str = "cpu",
              active: Tensor | None = None) -> StepTable:
        """A method's policy: its kernel at its SDE steps (``method.sde_steps``), the ODE elsewhere; with
        ``active`` (Bool[T], an update's window from ``method.update_steps``) only at the SDE steps inside it.
        The rows of the steps it keeps are the same numbers either way."""
        sde = method.sde_steps(sigmas)
        if active is not None:
            sde = sde & active.to(sde.device)
        kernel_rows, ode_rows = method.kernel.table(sigmas), ODEKernel().table(sigmas)
        rows = [kr if s else orow for kr, orow, s in zip(kernel_rows, ode_rows, sde.tolist())]
        return cls._from_rows(rows, sigmas, sde, device)

    @classmethod
    def of_kernel(cls, kernel: Kernel, sigmas: Tensor, device: torch.device | str = "cpu") -> StepTable:
        """One kernel at every step; noise where its variance is positive (the ODE kernel: evaluation)."""
        rows = kernel.table(sigmas)
        return cls._from_rows(rows, sigmas, torch.tensor([var > 0 for _, _, var in rows], dtype=torch.bool), device)

    @classmethod
    def ode(cls, sigmas: Tensor, device: torch.device | str = "cpu") -> StepTable:
        """The deterministic Euler sampler (evaluation)."""
        return cls.of_kernel(ODEKernel(), sigmas, device)

    @classmethod
    def _from_rows(cls, rows: list, sigmas: Tensor, sde: Tensor, device: torch.device | str) -> StepTable:
        t = torch.tensor(rows, dtype=torch.float64)  # [T, 3] = (a, b, var)
        f32 = dict(dtype=torch.float32, device=device)
        return cls(
            sigmas[:-1].to(**f32), t[:, 0].to(**f32), t[:, 1].to(**f32), t[:, 2].sqrt().to(**f32), sde.to(device),
            (sigmas[:-1] - sigmas[1:]).to(**f32),
        )


def _bcast(v: Tensor, like: Tensor) -> Tensor:
    return v.view(-1, *([1] * (like.ndim - 1)))


def transition(table: StepTable, steps: Tensor, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """(mu, std) of x_{i+1} for per-sample steps i: Long[b]; float32. mu: [b, ...], std: [b, 1, ...]."""
    mu = _bcast(table.a[steps], x) * x.float() + _bcast(table.b[steps], x) * v.float()
    return mu, _bcast(table.std[steps], x)


# --- the sampler --------------------------------------------------------------------------------
@torch.no_grad()
def integrate(velocity: VelocityFn, table: StepTable, x0: Tensor, cond: Any, null: Any, guidance: float,
              noise: torch.Generator | None, on_step: StepHook | None = None, start: int = 0,
              stop: int | None = None, formula: str = "cfg") -> Tensor:
    """x after steps ``start``..``stop``-1 of ``table`` (default: all) from x0: Tensor[b, ...] at
    sigma_start (float32; sigma = 1 for start 0).

    Step i: v from ``guided_velocity``, (mu, std) from ``transition``, x_{i+1} = mu + std * eps at the
    table's SDE steps (eps from ``noise``, on its device; the default generator on the CPU when None),
    mu elsewhere; ``on_step`` sees every step's (i, x_i, x_{i+1}, mu, std)."""
    x = x0.float()
    b = x.shape[0]
    for i in range(start, table.a.numel() if stop is None else stop):
        step = torch.full((b,), i, dtype=torch.long, device=x.device)
        v = guided_velocity(velocity, x, table.sigma[step], cond, null, guidance, formula=formula)
        mu, std = transition(table, step, x, v)
        if bool(table.sde[i]):
            device = "cpu" if noise is None else noise.device
            x_next = mu + std * torch.randn(mu.shape, generator=noise, device=device).to(mu.device)
        else:
            x_next = mu
        if on_step is not None:
            on_step(i, x, x_next, mu, std)
        x = x_next
    return x


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
    formula: str = "cfg",
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
    table = StepTable.of_kernel(kernel, sigmas, noise.device)
    size = chunk or max(1, len(prompts))
    out = []
    for start in range(0, len(prompts), size):
        rows = prompts[start : start + size]
        null = model.null_cond(len(rows)) if guidance != 1.0 else None
        x = integrate(model.velocity, table, noise[start : start + size], model.encode_prompts(rows), null, guidance,
                      generator, formula=formula)
        out.append(model.decode(x).float() if decode else x)
    return torch.cat(out)
