"""CPS (coefficient-preserving sampling): re-noise the predicted x0 with a rotated share of x1."""

import math

from grpo_bench.api import Kernel, Method, MethodConfig, register_kernel, register_method


@register_kernel("cps")
class CPSKernel(Kernel):
    """CPS (coefficient-preserving sampling): re-noise x0_hat with a rotated share of x1_hat."""

    std_formula = "σ'·sin(aπ/2)"
    max_noise_level = 1.0  # a is an angle a*pi/2 in [0, pi/2]

    def variance(self, sigma, sigma_next, sigma_1):
        return (sigma_next * math.sin(self.noise_level * math.pi / 2)) ** 2

    def coefficients(self, sigma, sigma_next, var):
        # mu = (1-s')*x0_hat + s'*cos(a pi/2)*x1_hat, expanded in x and v.
        c = math.cos(self.noise_level * math.pi / 2)
        return (1 - sigma_next) + sigma_next * c, -sigma * (1 - sigma_next) + sigma_next * c * (1 - sigma)


@register_method("cps")
class CPS(Method):
    """Coefficient-Preserving Sampling.

    Kernel ``cps``: x' = (1-s')*x0_hat + s'*cos(a pi/2)*x1_hat + s'*sin(a pi/2)*eps, which keeps
    the signal/noise coefficients of x' exact. The last step is deterministic (s' = 0). The
    reference code scores transitions with the unscaled surrogate mean(-(x'-mu)^2).
    """

    paper = "Coefficients-Preserving Sampling for RL with Flow Matching (Wang & Yu, 2025)"
    step_rule = "stochastic steps 0..T-2 (the last CPS step is deterministic)"
    source = "CPS (Wang & Yu, 2025): its reference code (unscaled log-prob)"
    defaults = MethodConfig(
        kernel="cps",
        noise_level=0.7,
        logprob="unscaled",
        shared_noise=False,
        clip_range=1e-4,
        kl="none",
        equalizer=False,
    )
