"""Step kernels: the Gaussian x_{i+1} ~ N(mu, std^2) each method samples from (docs/design.md §2–3).

The base class and the deterministic ``ode`` kernel (the base sampler) live here; every method's
own kernel lives in its method file (methods/*.py) and registers with ``register_kernel``.

Every kernel is linear in (x, v):  mu = a_i * x + b_i * v,  var = var_i  (per step, scalar).
The methods differ only in (a_i, b_i, var_i). With the derived quantities

    x0_hat = x - sigma*v,   x1_hat = x + (1-sigma)*v,   score = -x1_hat / sigma

the score-corrected SDE kernels have mu = x - Delta*v + (var/2)*score, i.e.
    a = 1 - var/(2 sigma),   b = -(Delta + var*(1-sigma)/(2 sigma)).
The equalizer's lambda_i = |d mu / d v| is |b_i|. Coefficients are float64 Python scalars; a kernel
has no tensor step of its own: its rows become a ``StepTable`` and every caller (rollout, loss,
evaluation, sampling, the tests) steps with ``transition`` (core/sampling.py), in float32 whatever
the model dtype, so there is one arithmetic path.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import lru_cache

import torch
from torch import Tensor

from grpo_bench import params as plugin_params
from grpo_bench.core.schedule import validate
from grpo_bench.errors import UserError
from grpo_bench.params import NoParams, PluginParams
from grpo_bench.registry import Registry

KERNELS: Registry[type[Kernel]] = Registry("kernel")
LOGPROB_FORMS: Registry = Registry("log-prob form")


class ScheduleWarning(UserWarning):
    """A step of a schedule that a kernel treats specially (e.g. made deterministic)."""


def register_kernel(name: str):
    """Class decorator: ``@register_kernel("sage")`` on a ``Kernel`` subclass."""
    return KERNELS.register(name)


class Kernel(ABC):
    """One rollout step x -> x'. Subclasses define ``variance`` and, unless it is the score-corrected
    Euler mean, ``coefficients``; parameters of their own go in a nested ``Params`` model
    (set as ``kernel.<key>=value``, read as ``self.params.<key>``)."""

    name: str
    std_formula: str = ""  # shown in Table 1
    Params: type[PluginParams] = NoParams
    max_noise_level: float = math.inf
    """Largest allowed noise level (e.g. 1 for cps, whose noise is an angle a*pi/2)."""

    def __init__(self, noise_level: float = 0.0, score_term: bool = True, **params: object) -> None:
        if not (isinstance(noise_level, (int, float)) and math.isfinite(noise_level) and noise_level >= 0):
            raise UserError(f"noise level of kernel {self.name!r} must be a finite number >= 0, got {noise_level!r}")
        if noise_level > self.max_noise_level:
            raise UserError(f"noise level of kernel {self.name!r} must be in [0, {self.max_noise_level:g}], "
                            f"got {noise_level!r}")
        self.noise_level = float(noise_level)
        self.score_term = bool(score_term)
        self.params = plugin_params.parse(self.Params, dict(params), "kernel", f"kernel {self.name!r}")

    # --- per-step scalars -------------------------------------------------------------
    @abstractmethod
    def variance(self, sigma: float, sigma_next: float, sigma_1: float) -> float:
        """var_i of the step sigma -> sigma_next (sigma_1: the schedule's second entry)."""

    def coefficients(self, sigma: float, sigma_next: float, var: float) -> tuple[float, float]:
        """(a, b) with mu = a*x + b*v. Default: Euler step plus the score correction."""
        delta = sigma - sigma_next
        if not self.score_term:
            return 1.0, -delta
        return 1.0 - var / (2 * sigma), -(delta + var * (1 - sigma) / (2 * sigma))

    def variances(self, sigmas: Tensor) -> list[float]:
        """var_i for every step of a schedule (cached; negative values become 0 with a warning)."""
        return list(_variances(self, tuple(float(s) for s in sigmas)))

    def table(self, sigmas: Tensor) -> list[tuple[float, float, float]]:
        """(a_i, b_i, var_i) for every step."""
        s = [float(v) for v in sigmas]
        return [(*self.coefficients(s[i], s[i + 1], var), var) for i, var in enumerate(self.variances(sigmas))]

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.params.model_dump().items())
        return f"{type(self).__name__}(noise_level={self.noise_level}, score_term={self.score_term}{extra})"


@lru_cache(maxsize=256)
def _variances(kernel: Kernel, sigmas: tuple[float, ...]) -> tuple[float, ...]:
    out = []
    for i in range(len(sigmas) - 1):
        var = kernel.variance(sigmas[i], sigmas[i + 1], sigmas[1])
        if not math.isfinite(var) or var < 0:
            warnings.warn(
                f"kernel {kernel.name!r}: step {i} (sigma {sigmas[i]:.6g} -> {sigmas[i + 1]:.6g}) has "
                f"variance {var:.3g} < 0; it is treated as deterministic (var = 0)",
                ScheduleWarning,
                stacklevel=3,
            )
            var = 0.0
        out.append(var)
    return tuple(out)


@register_kernel("ode")
class ODEKernel(Kernel):
    """Deterministic Euler step x' = x - Delta*v (the base sampler)."""

    std_formula = "0"

    def variance(self, sigma, sigma_next, sigma_1):
        return 0.0

    def coefficients(self, sigma, sigma_next, var):
        return 1.0, -(sigma - sigma_next)


def make_kernel(name: str, noise_level: float = 0.0, score_term: bool = True,
                params: dict[str, object] | None = None) -> Kernel:
    """Build a registered kernel by name (UserError naming the allowed kernels otherwise);
    ``params``: its own parameters, keys without the ``kernel.`` prefix."""
    return KERNELS.get(name)(noise_level, score_term, **(params or {}))


# --- log-probabilities ------------------------------------------------------------------------
def _density_sensitivity(lam: float, std: float) -> float:
    return lam / std


def register_logprob(name: str, sensitivity: Callable[[float, float], float] = _density_sensitivity):
    """Function decorator: ``@register_logprob("gaussian")`` on ``f(x_next, mu, std) -> Tensor[B]``.

    ``sensitivity(lam, std)`` says how the size of d logp / d v at a step scales with the step's
    lam = |d mu / d v| and std; the equalizer divides by it. For a Gaussian density the gradient is
    (x' - mu) / var * lam = eps * lam / std, hence the default lam / std."""

    def decorator(fn):
        fn.sensitivity = sensitivity
        return LOGPROB_FORMS.register(name)(fn)

    return decorator


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@register_logprob("gaussian")
def gaussian_log_prob(x_next: Tensor, mu: Tensor, std: Tensor) -> Tensor:
    """Gaussian log density averaged over the non-batch elements: Tensor[B]."""
    std = torch.as_tensor(std, dtype=torch.float32, device=mu.device)
    lp = -((x_next.float() - mu.float()) ** 2) / (2 * std**2) - torch.log(std) - LOG_SQRT_2PI
    return lp.flatten(1).mean(1)


@register_logprob("unscaled", sensitivity=lambda lam, std: lam * std)  # d/dv of -(x'-mu)^2 = 2 eps std lam
def unscaled_log_prob(x_next: Tensor, mu: Tensor, std: Tensor) -> Tensor:
    """CPS's reference surrogate mean(-(x'-mu)^2): Tensor[B]."""
    return (-((x_next.float() - mu.float()) ** 2)).flatten(1).mean(1)


def log_prob(x_next: Tensor, mu: Tensor, std: Tensor, form: str = "gaussian") -> Tensor:
    """Per-sample log-prob of a transition, Tensor[batch], in float32."""
    return LOGPROB_FORMS.get(form)(x_next, mu, std)


# --- the gradient-norm equalizer ---------------------------------------------------------------
def equalizer(kernel: Kernel, sigmas: Tensor, logprob: str = "gaussian") -> Tensor:
    """S_i = median(N over stochastic steps) / (N_i + 1e-12): Tensor[steps].

    N_i is the log-prob form's sensitivity at the step: lambda_i / std_i for the Gaussian density
    (SAGE-GRPO's proxy), lambda_i * std_i for CPS's unscaled surrogate, lambda_i = |d mu / d v|.
    Deterministic steps (std 0) get S = 0 and are left out of the median (torch's lower median).
    """
    validate(sigmas)
    rows = kernel.table(sigmas)
    sensitivity = LOGPROB_FORMS.get(logprob).sensitivity
    n = torch.tensor([sensitivity(abs(b), math.sqrt(var)) if var > 0 else float("nan") for _, b, var in rows],
                     dtype=torch.float64)
    stochastic = ~torch.isnan(n)
    s = torch.zeros(len(rows), dtype=torch.float64)
    if stochastic.any():
        med = n[stochastic].median()
        s[stochastic] = med / (n[stochastic] + 1e-12)
    return s.float()


def stochastic_steps(kernel: Kernel, sigmas: Tensor) -> Tensor:
    """Bool Tensor[steps]: where the kernel injects noise (var > 0)."""
    return torch.tensor([var > 0 for var in kernel.variances(sigmas)], dtype=torch.bool)
