"""SAGE-GRPO: the exact-integral SDE, the gradient-norm equalizer and the dual KL trust region."""

from torch import Tensor

from grpo_bench.core.method import Method, MethodConfig, register_method


@register_method("sage_grpo")
class SageGRPO(Method):
    """SAGE-GRPO (manifold-aware exploration).

    Kernel ``sage``: var = eta^2 * (-Delta + ln((1-s')/(1-s))), the exact integral of the
    diffusion coefficient over the step (log curvature correction). Every stochastic step is
    trained, each weighted by the equalizer S_i; the trust region is the dual KL
    (moving anchor for position + step-wise for velocity) with an adaptive weight.
    """

    paper = "Manifold-Aware Exploration for RL in Video Generation (SAGE-GRPO)"
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
