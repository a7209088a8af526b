"""Flow-DPPO (UniRL): a per-step mask from the Gaussian KL between old and new step in place of ratio clipping."""

import torch

from grpo_bench.api import (
    Field,
    Method,
    MethodConfig,
    PluginParams,
    RatioInputs,
    RuleSpec,
    register_method,
    register_objective,
)


class DPPOParams(PluginParams):
    kl_threshold: float = Field(1e-5, gt=0)
    """A (sample, step) whose KL(new || old) is below this always passes (kl_mask_threshold)."""
    kl_coefficient: bool = True
    """Divide the squared mean shift by 2 std^2 (a KL; add_kl_coefficient); False: the plain mean square."""
    sde_steps: int = Field(3, ge=1)
    """Distinct SDE (and trained) steps drawn per update (num_sde_steps: 3)."""
    range_start: float = Field(0.0, ge=0, lt=1)
    """The draw's range [int(T * range_start), int(T * range_end)) (timestep_fraction: [0.0, 0.5])."""
    range_end: float = Field(0.5, gt=0, le=1)


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

    FlowGRPO's kernel on ``method.sde_steps`` (3) distinct steps drawn per update from the first half of the
    schedule, the ODE elsewhere, every SDE step trained; no ratio clip: the unclipped surrogate -A * rho is kept
    where the step's closed-form Gaussian KL between the new and the rollout mean is below ``method.kl_threshold``
    or where rho moves against the advantage, and zeroed where the KL is large and rho moves with it.
    """

    paper = "Flow-DPPO (UniRL, Tencent Hunyuan)"
    source = ("Tencent-Hunyuan/UniRL@1a7b501: examples/diffusion/sd3_flowdppo.yaml (adv_use_global_std l.27, "
              "kl_mask_threshold 1e-5 l.116, add_kl_coefficient l.117, eta 0.7 l.141, init_same_noise false l.144, "
              "AllSDEScheduler timestep_fraction [0.0, 0.5] l.151, num_sde_steps 3 l.152), "
              "unirl/utils/scheduler_utils.py (AllSDEScheduler.get_sde_indices l.112-124: distinct steps from "
              "[int(T*start), int(T*end)) per rollout), unirl/algorithms/flowdppo.py (the KL mask)")
    step_rule = "FlowGRPO's SDE on 3 distinct steps drawn per update from [0, T/2), ODE elsewhere; all trained"
    objective = "kl_mask"
    Params = DPPOParams
    revision = 1  # 1: sparse SDE steps and global std (was every step SDE, group std)

    defaults = MethodConfig(
        kernel="flow",  # unirl.sde.kernels.FlowSDEStrategy (sd3_flowdppo.yaml:47)
        noise_level=0.7,  # eta (sd3_flowdppo.yaml:141)
        logprob="gaussian",
        shared_noise=False,  # init_same_noise: false (sd3_flowdppo.yaml:144)
        adv_norm="global",  # adv_use_global_std: true (sd3_flowdppo.yaml:27)
        clip_range=1e-4,  # unused by the loss; kept for the clip-fraction metric
        kl="none",
        equalizer=False,
    )

    def own_step_rule(self) -> RuleSpec:
        """Sparse SDE steps (core/step_rules.py ``sparse``): UniRL's AllSDEScheduler draws ``num_sde_steps``
        distinct steps from [int(T*start), int(T*end)) and refuses more than the pool holds
        (scheduler_utils.py:103)."""
        p = self.params
        return RuleSpec("sparse", {"n": p.sde_steps, "range_start": p.range_start, "range_end": p.range_end},
                        {"n": "method.sde_steps", "range_start": "method.range_start", "range_end": "method.range_end"})
