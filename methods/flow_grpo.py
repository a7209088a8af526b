"""FlowGRPO (Liu et al., 2025): first-order SDE with g^2 = a^2 sigma/(1-sigma), fixed KL to pi_0."""

from grpo_bench.api import Kernel, Method, MethodConfig, register_kernel, register_method


@register_kernel("flow")
class FlowKernel(Kernel):
    """FlowGRPO: left-point estimate of the integral of g^2(s) = a^2 s/(1-s) over the step."""

    std_formula = "a·sqrt(σ/(1-σ)·Δ)"

    def variance(self, sigma, sigma_next, sigma_1):
        st = sigma_1 if sigma == 1.0 else sigma
        return self.noise_level**2 * sigma / (1 - st) * (sigma - sigma_next)


@register_method("flow_grpo")
class FlowGRPO(Method):
    """FlowGRPO.

    Kernel ``flow``: the left-point (Euler) estimate of the integral of a^2 s/(1-s) over a step,
    which over-injects noise at high sigma. Trains steps 0..T-2 of every sample, independent
    initial noise per rollout, and a KL penalty to the initial policy.
    """

    paper = "Flow-GRPO: Training Flow Matching Models via Online RL (Liu et al., 2025)"
    step_rule = "stochastic steps 0..T-2"
    source = ("yifan123/flow_grpo@9745241: scripts/train_sd3.py (KL l.900), diffusers_patch/sd3_sde_with_logprob.py "
              "(std_dev_t l.50), config/base.py (noise_level 0.7 l.61, clip 1e-4 l.99), config/grpo.py (pickscore_sd3: "
              "global_std True, same_latent False)")
    defaults = MethodConfig(
        kernel="flow",
        noise_level=0.7,
        logprob="gaussian",
        shared_noise=False,
        adv_norm="global",  # sample.global_std = True in the SD3.5 configs (config/grpo.py, config/base.py:59)
        clip_range=1e-4,
        kl="flow_grpo",  # its code's estimator (scripts/train_sd3.py:900); `fixed` is the fair block's
        equalizer=False,
    )
