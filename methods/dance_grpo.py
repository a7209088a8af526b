"""DanceGRPO (Xue et al., 2025): constant-coefficient SDE, shared group noise, random step subset."""

from grpo_bench.api import Kernel, Method, MethodConfig, register_kernel, register_method


@register_kernel("dance")
class DanceKernel(Kernel):
    """DanceGRPO: constant diffusion coefficient, var = eta^2 * Delta."""

    std_formula = "η·sqrt(Δ)"

    def variance(self, sigma, sigma_next, sigma_1):
        return self.noise_level**2 * (sigma - sigma_next)


@register_method("dance_grpo")
class DanceGRPO(Method):
    """DanceGRPO.

    Kernel ``dance``: var = eta^2 * Delta with the score correction on. All G rollouts of a prompt
    start from the same initial noise, so the group's spread comes from the SDE alone. Each
    sample trains a random 60% of steps 0..T-2 (timestep fraction in the reference code).
    """

    paper = "DanceGRPO: Unleashing GRPO on Visual Generation (Xue et al., 2025)"
    step_rule = "random 60% of 0..T-2 per sample"
    source = "DanceGRPO (Xue et al., 2025): its public code (timestep_fraction 0.6, shared group noise)"
    defaults = MethodConfig(
        kernel="dance",
        noise_level=0.3,
        logprob="gaussian",
        train_fraction=0.6,
        shared_noise=True,
        adv_norm="group_unbiased",  # torch.std of the group (its train scripts)
        clip_range=1e-4,
        kl="none",
        equalizer=False,
    )
