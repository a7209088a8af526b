"""GRPO-Guard (Wang et al., 2025): FlowGRPO with the per-step log-ratio normalised and the step losses reweighted."""

import torch

from grpo_bench.api import Method, MethodConfig, PluginParams, RatioInputs, register_method, register_objective


class GuardParams(PluginParams):
    reweight: bool = True
    """Divide each step's loss by its Delta (``policy_loss / sqrt_dt.mean()**2``); False: the ratio normalisation
    alone (Flow-Factory's GRPOGuardTrainer)."""


def _pooled_by_step(values: torch.Tensor, steps: torch.Tensor | None) -> torch.Tensor:
    """Each sample's value replaced by the mean over the samples at its step: the official loop runs one step j
    for a whole micro-batch and reduces the mean shift over all of it (a scalar per step), here a call may hold
    several steps."""
    if steps is None:
        return values
    _, group = torch.unique(steps, return_inverse=True)
    sums = torch.zeros(int(group.max()) + 1, dtype=values.dtype, device=values.device).index_add(0, group, values)
    counts = torch.bincount(group).to(values.dtype)
    return (sums / counts)[group]


@register_objective("ratio_norm")
def ratio_norm_objective(inp: RatioInputs, params: GuardParams | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped surrogate on the normalised ratio exp(s * (logp - logp_old) + mse / (2 s)), s = the step's std,
    mse = mean_e (mu - mu_old)^2 pooled over the step's samples; with ``reweight`` divided by the step's Delta.

    flow_grpo@9745241 scripts/train_sd3_GRPO_Guard.py: ratio_mean_bias l.917-918 (``.mean(dim=())`` of a
    per-sample log-prob reduces over the whole micro-batch: one scalar), ratio l.919, ``policy_loss /
    (sqrt_dt.mean()**2)`` l.932 (sqrt_dt = sqrt(Delta))."""
    s = inp.std
    mse = _pooled_by_step((inp.mu.float() - inp.mu_old.float()).pow(2).flatten(1).mean(1), inp.steps)
    ratio = torch.exp((inp.logp - inp.logp_old) * s + mse / (2 * s))
    unclipped = -inp.adv * ratio
    clipped = -inp.adv * ratio.clamp(1 - inp.clip_range, 1 + inp.clip_range)
    loss = inp.weight * torch.maximum(unclipped, clipped)
    if params is None or params.reweight:
        loss = loss / inp.delta
    return loss, ratio


@register_method("grpo_guard")
class GRPOGuard(Method):
    """GRPO-Guard.

    FlowGRPO's kernel and steps; the PPO ratio is replaced by the normalised ratio (objective ``ratio_norm``),
    which centres and rescales every step's log-ratio so that the clip acts alike at every noise level, and each
    step's loss is divided by its Delta (the per-step reweighting; ``method.reweight=false`` turns it off). No KL:
    every config of flow_grpo's config/grpo_guard.py sets ``train.beta = 0.0``.
    """

    paper = "GRPO-Guard: Mitigating Implicit Over-Optimization in Flow Matching via Regulated Clipping (2025)"
    source = ("yifan123/flow_grpo@9745241: scripts/train_sd3_GRPO_Guard.py (l.915-932), config/grpo_guard.py "
              "(pickscore_hps_sd3_ratio_norm l.84: beta 0.0 l.111, global_std False l.112, same_latent False l.113, "
              "clip 4e-6 l.124, rationorm l.127)")
    step_rule = "stochastic steps 0..T-2 (FlowGRPO's)"
    objective = "ratio_norm"
    Params = GuardParams
    revision = 1  # 1: reweight by Delta, the mean shift pooled per step, no KL (was |b_i|, per sample, KL fixed)

    defaults = MethodConfig(
        kernel="flow",
        noise_level=0.7,  # config/base.py:61 (the GRPO-Guard configs keep it)
        logprob="gaussian",
        shared_noise=False,  # config/grpo_guard.py:113
        adv_norm="group",  # global_std = False (config/grpo_guard.py:112)
        clip_range=4e-6,  # config/grpo_guard.py:124 (the normalised ratio moves less)
        kl="none",  # train.beta = 0.0 (config/grpo_guard.py:111)
        equalizer=False,
    )
