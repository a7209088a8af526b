"""CPS (coefficient-preserving sampling): re-noise the predicted x0 with a rotated share of x1."""

from grpo_bench.core.method import Method, MethodConfig, register_method


@register_method("cps")
class CPS(Method):
    """Coefficient-Preserving Sampling.

    Kernel ``cps``: x' = (1-s')*x0_hat + s'*cos(a pi/2)*x1_hat + s'*sin(a pi/2)*eps, which keeps
    the signal/noise coefficients of x' exact. The last step is deterministic (s' = 0). The
    reference code scores transitions with the unscaled surrogate mean(-(x'-mu)^2).
    """

    paper = "Coefficients-Preserving Sampling for RL with Flow Matching (Wang & Yu, 2025)"
    defaults = MethodConfig(
        kernel="cps",
        noise_level=0.7,
        logprob="unscaled",
        shared_noise=False,
        clip_range=1e-4,
        kl="none",
        equalizer=False,
    )
