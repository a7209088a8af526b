"""SAGE-GRPO: the exact-integral SDE, the gradient-norm equalizer and the dual KL trust region."""

import math

from torch import Tensor

from grpo_bench.api import Kernel, Method, MethodConfig, register_kernel, register_method


@register_kernel("sage")
class SageKernel(Kernel):
    """SAGE-GRPO: the exact integral of eta^2 s/(1-s) over [sigma', sigma] (log correction)."""

    std_formula = "η·sqrt(-Δ + ln((1-σ')/(1-σ)))"
    clamp = 1 - 3e-3  # the integral diverges at sigma = 1

    def variance(self, sigma, sigma_next, sigma_1):
        st = min(sigma, self.clamp)
        return self.noise_level**2 * (-(sigma - sigma_next) + math.log((1 - sigma_next) / (1 - st)))


@register_method("sage_grpo")
class SageGRPO(Method):
    """SAGE-GRPO (manifold-aware exploration).

    Kernel ``sage``: var = eta^2 * (-Delta + ln((1-s')/(1-s))), the exact integral of the
    diffusion coefficient over the step (log curvature correction). Every stochastic step is
    trained, each weighted by the equalizer S_i; the trust region is the dual KL
    (moving anchor for position + step-wise for velocity) with an adaptive weight.
    """

    paper = "Manifold-Aware Exploration for RL in Video Generation (SAGE-GRPO)"
    step_rule = "every stochastic step, equalizer-weighted"
    source = "SAGE-GRPO: its official code (precise SDE, equalizer, dual KL)"
    defaults = MethodConfig(
        kernel="sage",
        noise_level=0.5,
        logprob="gaussian",
        shared_noise=False,
        clip_range=1e-4,
        kl="dual",
        equalizer=True,
    )

    def eligible_steps(self, sigmas: Tensor) -> Tensor:
        """All stochastic steps, the last one included."""
        return self.sde_steps(sigmas).clone()
