"""FlowGRPO (Liu et al., 2025): first-order SDE with g^2 = a^2 sigma/(1-sigma), fixed KL to pi_0."""

from grpo_bench.core.method import Method, MethodConfig, register_method


@register_method("flow_grpo")
class FlowGRPO(Method):
    """FlowGRPO.

    Kernel ``flow``: the left-point (Euler) estimate of the integral of a^2 s/(1-s) over a step,
    which over-injects noise at high sigma. Trains steps 0..T-2 of every sample, independent
    initial noise per rollout, and a KL penalty to the initial policy.
    """

    paper = "Flow-GRPO: Training Flow Matching Models via Online RL (Liu et al., 2025)"
    defaults = MethodConfig(
        kernel="flow",
        noise_level=0.7,
        logprob="gaussian",
        shared_noise=False,
        clip_range=1e-4,
        kl="fixed",
        equalizer=False,
    )
