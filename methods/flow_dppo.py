"""Flow-DPPO (UniRL): a per-step mask from the Gaussian KL between old and new step in place of ratio clipping."""

import torch

from grpo_bench.api import Field, Method, MethodConfig, PluginParams, RatioInputs, register_method, register_objective


class DPPOParams(PluginParams):
    kl_threshold: float = Field(1e-5, gt=0)
    """A (sample, step) whose KL(new || old) is below this always passes (kl_mask_threshold)."""
    kl_coefficient: bool = True
    """Divide the squared mean shift by 2 std^2 (a KL; add_kl_coefficient); False: the plain mean square."""


@register_objective("kl_mask")
def kl_mask_objective(inp: RatioInputs, params: DPPOParams | None) -> tuple[torch.Tensor, torch.Tensor]:
    """-A * rho where kept, 0 where masked: a (sample, step) is masked when its KL = mean_e (mu - mu_old)^2 / (2 std^2)
    is at least the threshold and rho moves with the advantage (rho > 1 with A > 0, or rho < 1 with A < 0)."""
    params = params or DPPOParams()
    ratio = torch.exp(inp.logp - inp.logp_old)
    sq = (inp.mu.float() - inp.mu_old.float()).pow(2).flatten(1).mean(1)
    kl = sq / (2 * inp.std**2) if params.kl_coefficient else sq
    adv = inp.adv.detach()
    far = kl.detach() >= params.kl_threshold
    masked = far & (((ratio > 1) & (adv > 0)) | ((ratio < 1) & (adv < 0)))
    loss = torch.where(masked, torch.zeros_like(ratio), -adv * ratio)
    return inp.weight * loss, ratio


@register_method("flow_dppo")
class FlowDPPO(Method):
    """Flow-DPPO.

    FlowGRPO's kernel and steps; no ratio clip: the unclipped surrogate -A * rho is kept where the
    step's closed-form Gaussian KL between the new and the rollout mean is below ``method.kl_threshold``
    or where rho moves against the advantage, and zeroed where the KL is large and rho moves with it.
    """

    paper = "Flow-DPPO (UniRL, Tencent Hunyuan)"
    source = "Tencent-Hunyuan/UniRL: unirl/algorithms/flowdppo.py"
    step_rule = "stochastic steps 0..T-2 (FlowGRPO's)"
    objective = "kl_mask"
    Params = DPPOParams

    defaults = MethodConfig(
        kernel="flow",
        noise_level=0.7,
        logprob="gaussian",
        shared_noise=False,
        clip_range=1e-4,  # unused by the loss; kept for the clip-fraction metric
        kl="none",
        equalizer=False,
    )
