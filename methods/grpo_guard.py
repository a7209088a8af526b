"""GRPO-Guard (Wang et al., 2025): FlowGRPO with the per-step log-ratio normalised and the step gradients reweighted."""

import torch

from grpo_bench.api import Method, MethodConfig, PluginParams, RatioInputs, register_method, register_objective


class GuardParams(PluginParams):
    reweight: bool = True
    """Divide each step's loss by lambda_i = |d mu / d v| (the gradient reweighting); False: the ratio
    normalisation alone (Flow-Factory's GRPOGuardTrainer)."""


@register_objective("ratio_norm")
def ratio_norm_objective(inp: RatioInputs, params: GuardParams | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped surrogate on the normalised ratio exp(s * (logp - logp_old) + mse / (2 s)), s = the step's std,
    mse = mean_e (mu - mu_old)^2; with ``reweight`` divided by lambda_i.

    For the Gaussian log-prob this log-ratio is mean_e[eps * (mu - mu_old)] with eps the rollout's unit noise:
    the mean shift -mse/(2 s^2) that makes the plain log-ratio negative on average is removed and its 1/s
    scale undone, so every step's ratio has the same spread."""
    s = inp.std
    mse = (inp.mu.float() - inp.mu_old.float()).pow(2).flatten(1).mean(1)
    ratio = torch.exp((inp.logp - inp.logp_old) * s + mse / (2 * s))
    unclipped = -inp.adv * ratio
    clipped = -inp.adv * ratio.clamp(1 - inp.clip_range, 1 + inp.clip_range)
    loss = inp.weight * torch.maximum(unclipped, clipped)
    if params is None or params.reweight:
        loss = loss / inp.lam
    return loss, ratio


@register_method("grpo_guard")
class GRPOGuard(Method):
    """GRPO-Guard.

    FlowGRPO's kernel and steps; the PPO ratio is replaced by the normalised ratio (objective
    ``ratio_norm``), which centres and rescales every step's log-ratio so that the clip acts alike at
    every noise level, and each step's loss is divided by lambda_i = |d mu / d v| (the per-step gradient
    reweighting; ``method.reweight=false`` turns it off).
    """

    paper = "GRPO-Guard: Mitigating Implicit Over-Optimization in Flow Matching via Regulated Clipping (2025)"
    source = ("X-GenGroup/Flow-Factory: src/flow_factory/trainers/grpo.py (GRPOGuardTrainer); flow_grpo's "
              "rationorm path read from an unnamed stored copy")
    step_rule = "stochastic steps 0..T-2 (FlowGRPO's)"
    objective = "ratio_norm"
    Params = GuardParams

    defaults = MethodConfig(
        kernel="flow",
        noise_level=0.7,
        logprob="gaussian",
        shared_noise=False,
        clip_range=4e-6,  # config.train.clip_range = 4e-6 in the GRPO-Guard configs (the normalised ratio moves less)
        kl="fixed",
        equalizer=False,
    )
