"""Tempered-GRPO: a fifth GRPO variant in one file (the walk-through of docs/adding_a_method.md).

* kernel ``tempered``: var = eta^2 * Delta * sigma^power, with its own parameter ``kernel.power``
  (0 gives DanceGRPO's constant coefficient; larger powers put the noise at high sigma);
* a step rule of its own: only the stochastic steps of the first half of the schedule are trained;
* an EMA trust region: the analytic KL to an anchor that follows the policy as an exponential
  moving average (the registered ``ema`` update policy, ``anchor.tau``), with a parameter of its own,
  ``kl.scale``.

It imports only grpo_bench.api (and torch). Load it with GRPO_BENCH_PLUGINS=path/to/tempered_grpo.py,
or install it as a package with an entry point in the ``grpo_bench.plugins`` group.
"""

from torch import Tensor

from grpo_bench.api import (
    Field,
    Kernel,
    KLInputs,
    KLVariant,
    Method,
    MethodConfig,
    PluginParams,
    analytic_kl,
    register_kernel,
    register_kl,
    register_method,
)


@register_kernel("tempered")
class TemperedKernel(Kernel):
    """Tempered noise: var = eta^2 * Delta * sigma^power (score-corrected Euler mean)."""

    std_formula = "η·sqrt(Δ·σ^p)"

    class Params(PluginParams):
        power: float = Field(1.0, ge=0, le=4)
        """Exponent p of sigma in the variance; 0 is DanceGRPO's kernel."""

    def variance(self, sigma, sigma_next, sigma_1):
        return self.noise_level**2 * (sigma - sigma_next) * sigma**self.params.power


@register_kl("ema")
class EMAKL(KLVariant):
    """Analytic KL to an exponential-moving-average anchor of the policy, times kl.scale."""

    anchors = {"ema": "ema"}

    class Params(PluginParams):
        scale: float = Field(1.0, gt=0)
        """Factor on the analytic KL (lets one KL weight serve several variants)."""

    def __call__(self, inp: KLInputs) -> dict[str, Tensor]:
        return {"kl": self.params.scale * analytic_kl(inp.mu, inp.mu_ref["ema"], inp.var)}


@register_method("tempered_grpo")
class TemperedGRPO(Method):
    """Tempered-GRPO: tempered SDE noise, trained on the high-noise half of the schedule, EMA trust region."""

    paper = "docs/adding_a_method.md (an example plug-in)"
    defaults = MethodConfig(
        kernel="tempered",
        noise_level=0.5,
        kl="ema",
        params={"kernel.power": 1.5, "anchor.tau": 0.95},
    )

    def eligible_steps(self, sigmas: Tensor) -> Tensor:
        """Stochastic steps among the first half of the schedule (at least the first step)."""
        mask = self.sde_steps(sigmas).clone()
        half = max(1, len(sigmas) // 2)  # ceil(T / 2) of the T = len(sigmas) - 1 steps
        mask[half:] = False
        return mask
