"""DiffusionNFT (Zheng et al., 2025): likelihood-free online RL, a negative-aware flow-matching loss on ODE samples."""

import torch

from grpo_bench.api import (
    AnchorPolicy,
    Field,
    LossContext,
    Method,
    MethodConfig,
    PluginParams,
    Rollout,
    StepTerms,
    UserError,
    guided_velocity,
    index_cond,
    register_anchor_policy,
    register_loss_family,
    register_method,
)

OLD = "nft_old"
"""The anchor holding the old policy v_old (an EMA of the policy)."""


@register_anchor_policy("nft_ema")
class NFTDecay(AnchorPolicy):
    """DiffusionNFT's old policy: old <- d * old + (1 - d) * policy after every optimizer step s, with
    d = min(uprate * (s - flat), uphold) from step flat on and 0 before (live: read at loss time)."""

    live = True

    class Params(PluginParams):
        flat: int = Field(0, ge=0)
        uprate: float = Field(0.001, ge=0)
        uphold: float = Field(0.5, ge=0, lt=1)

    def decay(self, optimizer_steps: int) -> float:
        p = self.params
        return 0.0 if optimizer_steps < p.flat else min((optimizer_steps - p.flat) * p.uprate, p.uphold)

    def update(self, snapshot, policy, optimizer_steps):
        d = self.decay(optimizer_steps)
        for n, p in policy.items():
            snapshot[n].lerp_(p.to(snapshot[n].dtype), 1.0 - d)
        return True


class NFTParams(PluginParams):
    beta: float = Field(1.0, gt=0)
    """Step size of the implicit positive / negative policies (config.beta = 1.0; 0.1 in some configs)."""
    adv_clip_max: float = Field(5.0, gt=0)
    """Advantages are clipped to +-this and mapped to r = A / (2 * this) + 1/2 in [0, 1]."""
    ema_flat: int = Field(0, ge=0)
    """Old-policy decay schedule (decay_type 1: flat 0, uprate 0.001, uphold 0.5)."""
    ema_uprate: float = Field(0.001, ge=0)
    ema_uphold: float = Field(0.5, ge=0, lt=1)


def _x0_loss(x0_pred: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """mean_e (x0_pred - x0)^2 / w with the adaptive weight w = mean_e |x0_pred - x0| (no gradient, >= 1e-5)."""
    err = (x0_pred - x0).flatten(1)
    with torch.no_grad():
        w = err.abs().double().mean(1).clamp(min=1e-5).to(err.dtype)
    return err.pow(2).mean(1) / w


@register_loss_family("nft", needs_logprob=False)
def nft_terms(ctx: LossContext, ro: Rollout, adv: torch.Tensor, rows: torch.Tensor, steps: torch.Tensor) -> StepTerms:
    """The negative-aware fine-tuning loss of b samples, each at the schedule time t = sigma_i of its step.

    x_t = (1 - t) x0 + t eps re-noises the rollout's final sample x0 with fresh noise; with v the policy's
    velocity and v_old the old policy's, v+ = beta v + (1 - beta) v_old and v- = (1 + beta) v_old - beta v;
    L = adv_clip_max * (r * l(x_t - t v+) + (1 - r) * l(x_t - t v-)) / beta, l the adaptively weighted
    squared x0 error, r = clip(A) / (2 adv_clip_max) + 1/2."""
    p = ctx.method_params
    slot = ro.slot[steps.cpu()].to(ro.x.device)
    x0, eps = ro.final[rows].float(), ro.noise[rows, slot].float()
    t = ctx.table.sigma[steps]  # [b]
    tb = t.view(-1, *([1] * (x0.ndim - 1)))
    xt = (1 - tb) * x0 + tb * eps
    cond = index_cond(ro.cond, rows)
    null = ctx.model.null_cond(len(rows)) if ctx.guidance != 1.0 else None
    with torch.no_grad():
        v_old = guided_velocity(ctx.live_anchors[OLD], xt, t, cond, null, ctx.guidance,
                                formula=ctx.guidance_formula).float()
    v = guided_velocity(ctx.model.velocity, xt, t, cond, null, ctx.guidance, ctx.detach_uncond,
                        ctx.guidance_formula).float()
    a = adv[rows].clamp(-p.adv_clip_max, p.adv_clip_max)
    r = (a / p.adv_clip_max / 2 + 0.5).clamp(0, 1)
    positive = _x0_loss(xt - tb * (p.beta * v + (1 - p.beta) * v_old), x0)
    negative = _x0_loss(xt - tb * ((1 + p.beta) * v_old - p.beta * v), x0)
    loss = (r * positive + (1 - r) * negative) / p.beta * p.adv_clip_max
    zeros = torch.zeros_like(loss)
    factor = 2 if ctx.guidance != 1.0 else 1
    return StepTerms(ctx.weight[steps] * loss, {"kl": zeros}, torch.ones_like(loss).detach(),
                     forward_rows=2 * factor * len(rows))


@register_method("diffusion_nft")
class DiffusionNFT(Method):
    """DiffusionNFT.

    Likelihood-free: rollouts are deterministic ODE samples (no log-prob is ever computed); each update
    re-noises every final sample at random schedule times (``max_train_steps`` per sample) with fresh
    noise and trains the negative-aware flow-matching loss (loss family ``nft``) against an old policy,
    an EMA of the policy (anchor policy ``nft_ema``).
    """

    paper = "DiffusionNFT: Online Diffusion Reinforcement with Forward Process (Zheng et al., 2025)"
    source = "NVlabs/DiffusionNFT: scripts/train_nft_sd3.py, config/nft.py"
    step_rule = "ODE rollouts; the NFT loss at random schedule times of each final sample"
    loss_family = "nft"
    Params = NFTParams

    defaults = MethodConfig(
        kernel="ode",
        noise_level=0.0,
        logprob="gaussian",
        shared_noise=False,
        clip_range=1e-4,  # unused
        kl="none",
        equalizer=False,
    )

    def check_run(self, sigmas, run):
        if self.config.kl not in (None, "none"):  # a trust region it cannot act on would sit in a table as a zero
            raise UserError(f"method {self.name!r} computes no log-probs (loss family 'nft'), so a KL trust region "
                            f"would stay 0; got kl={self.config.kl!r}, allowed: none")
        super().check_run(sigmas, run)

    def eligible_steps(self, sigmas):
        """Every step: each is a time t = sigma_i at which the final sample is re-noised."""
        return torch.ones(len(sigmas) - 1, dtype=torch.bool)

    def anchor_policies(self):
        return {OLD: "nft_ema"}

    def anchor_params(self):
        p = self.params
        return {"flat": p.ema_flat, "uprate": p.ema_uprate, "uphold": p.ema_uphold}
