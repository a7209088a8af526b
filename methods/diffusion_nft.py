"""DiffusionNFT (Zheng et al., 2025): likelihood-free online RL, a negative-aware flow-matching loss on ODE samples.

Read from NVlabs/DiffusionNFT (commit 24af555), the README's runs (``--config config/nft.py:sd3_geneval``,
``sd3_multi_reward``; ``T.py:N`` = scripts/train_nft_sd3.py line N, ``nft.py`` = config/nft.py, ``base.py`` =
config/base.py):

- rollouts from the old policy: ``set_adapter("old")`` around ``pipeline_with_logprob`` (T.py:640-659);
- the old policy starts as the policy (T.py:576-579) and follows it once per epoch, after the epoch's optimizer
  steps: ``old = old * decay + policy * (1 - decay)``, ``decay = return_decay(global_step, decay_type)``
  (T.py:1034-1039), global_step counting optimizer steps (T.py:1021); ``decay_type = 1`` (nft.py:60; only
  ``sd3_ocr`` sets 2, nft.py:78): flat 0, uprate 0.001, uphold 0.5 (T.py:174-177);
- the loss: beta 1.0 (nft.py:61; 0.1 for sd3_multi_reward, nft.py:137), adv_clip_max 5 (base.py:84),
  T.py:927-960; plus ``train.beta`` (1e-4: nft.py:24, base.py:89) times the mean squared velocity difference to
  the reference model, the LoRA adapters disabled (T.py:894-905, 966-970): pi_0 here;
- the trained times: ``int(num_steps * timestep_fraction)`` of the sampler's times (T.py:569, timestep_fraction
  0.99 base.py:87: 9 of num_steps 10, nft.py:20), a random permutation per sample (T.py:810-816), t = sigma_i
  (``timesteps / 1000``, T.py:864), fresh noise per time (T.py:868);
- the sampler: ``solver = "dpm2"``, ``deterministic = True`` (nft.py:65-66): multistep DPM-Solver++(2M) in x0
  form, first and last step DDIM (flow_grpo/diffusers_patch/solver.py:207-260). Its second-order step needs the
  previous step's x0 prediction, which the one-step table x' = a x + b v cannot express: rollouts here are the
  Euler ODE (what its first and last steps are, and what its evaluation samples: ``solver="flow"``,
  ``deterministic=True``, T.py:279-280);
- advantages: ``sample.global_std = True`` (base.py:57), the batch's std + 1e-4 (flow_grpo/stat_tracking.py:28);
- not built: its evaluation reads a second EMA of the policy (``train.ema``, base.py:92; T.py:220-221, 1024-1029);
  this project evaluates the policy.
"""

import torch

from grpo_bench.api import (
    AnchorPolicy,
    Field,
    LossSamples,
    LossVelocities,
    Method,
    MethodConfig,
    PluginParams,
    StepTerms,
    UserError,
    register_anchor_policy,
    register_loss_family,
    register_method,
)

OLD = "nft_old"
"""The anchor holding the old policy v_old: it samples the rollouts and anchors the loss."""
REF = "nft_ref"
"""The reference model pi_0 of the loss's KL term (the official LoRA with its adapters disabled)."""
KL_DIV = "nft_kl_div"
"""Logged per update: mean_e (v - v_ref)^2, the official ``kl_div`` (T.py:973)."""


@register_anchor_policy("nft_ema")
class NFTDecay(AnchorPolicy):
    """DiffusionNFT's old policy: once per update, after its optimizer steps (s = the run's total),
    old <- d * old + (1 - d) * policy with d = min(uprate * (s - flat), uphold) from s = flat on, 0 before.
    Live: the loss evaluates it at the re-noised x_t, which no rollout holds."""

    live = True

    class Params(PluginParams):
        flat: int = Field(0, ge=0)
        uprate: float = Field(0.001, ge=0)
        uphold: float = Field(0.5, ge=0, lt=1)

    def decay(self, optimizer_steps: int) -> float:
        p = self.params
        return 0.0 if optimizer_steps < p.flat else min((optimizer_steps - p.flat) * p.uprate, p.uphold)

    def update(self, snapshot, policy, optimizer_steps):
        return False  # not per optimizer step: once per update (after_update)

    def after_update(self, snapshot, policy, optimizer_steps):
        d = self.decay(optimizer_steps)
        for n, p in policy.items():
            snapshot[n].lerp_(p.to(snapshot[n].dtype), 1.0 - d)
        return True


@register_anchor_policy("nft_reference")
class NFTReference(AnchorPolicy):
    """The initial policy pi_0, never updated; live: the loss evaluates it at the re-noised x_t."""

    live = True

    def update(self, snapshot, policy, optimizer_steps):
        return False


class NFTParams(PluginParams):
    beta: float = Field(1.0, gt=0)
    """Step size of the implicit positive / negative policies (config.beta, nft.py:61)."""
    adv_clip_max: float = Field(5.0, gt=0)
    """Advantages are clipped to +-this and mapped to r = A / (2 * this) + 1/2 in [0, 1] (base.py:84)."""
    kl_beta: float = Field(1e-4, ge=0)
    """Weight of mean_e (v - v_ref)^2 to pi_0 in the loss (config.train.beta, nft.py:24); 0 drops the term."""
    ema_flat: int = Field(0, ge=0)
    """Old-policy decay schedule (decay_type 1: flat 0, uprate 0.001, uphold 0.5; T.py:174-177)."""
    ema_uprate: float = Field(0.001, ge=0)
    ema_uphold: float = Field(0.5, ge=0, lt=1)


def _x0_loss(x0_pred: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """mean_e (x0_pred - x0)^2 / w with the adaptive weight w = mean_e |x0_pred - x0| (no gradient, >= 1e-5)."""
    err = (x0_pred - x0).flatten(1)
    with torch.no_grad():
        w = err.abs().double().mean(1).clamp(min=1e-5).to(err.dtype)
    return err.pow(2).mean(1) / w


@register_loss_family("nft", needs_logprob=False)
def nft_terms(samples: LossSamples, velocity: LossVelocities, p: NFTParams) -> StepTerms:
    """The negative-aware fine-tuning loss of b samples, each at the schedule time t = sigma_i of its step.

    x_t = (1 - t) x0 + t eps re-noises the rollout's final sample x0 with fresh noise; with v the policy's
    velocity and v_old the old policy's, v+ = beta v + (1 - beta) v_old and v- = (1 + beta) v_old - beta v;
    L = adv_clip_max * (r * l(x_t - t v+) + (1 - r) * l(x_t - t v-)) / beta + kl_beta * mean_e (v - v_ref)^2,
    l the adaptively weighted squared x0 error, r = clip(A) / (2 adv_clip_max) + 1/2 (T.py:927-970)."""
    x0, eps = samples.final.float(), samples.noise.float()
    t = samples.sigma  # [b]
    tb = t.view(-1, *([1] * (x0.ndim - 1)))
    xt = (1 - tb) * x0 + tb * eps
    v_old = velocity.anchor(OLD, xt, t).float()
    v = velocity.policy(xt, t).float()
    a = samples.advantages.clamp(-p.adv_clip_max, p.adv_clip_max)
    r = (a / p.adv_clip_max / 2 + 0.5).clamp(0, 1)
    positive = _x0_loss(xt - tb * (p.beta * v + (1 - p.beta) * v_old), x0)
    negative = _x0_loss(xt - tb * ((1 + p.beta) * v_old - p.beta * v), x0)
    loss = (r * positive + (1 - r) * negative) / p.beta * p.adv_clip_max
    kl_div = torch.zeros_like(loss)
    if p.kl_beta > 0:  # the official term is part of the loss itself, not a trust region the run weights
        kl_div = (v - velocity.anchor(REF, xt, t).float()).pow(2).flatten(1).mean(1)
        loss = loss + p.kl_beta * kl_div
    return StepTerms(samples.weight * loss, {"kl": torch.zeros_like(loss), KL_DIV: kl_div.detach()},
                     torch.ones_like(loss).detach(), forward_rows=velocity.rows)


@register_method("diffusion_nft")
class DiffusionNFT(Method):
    """DiffusionNFT.

    Likelihood-free: rollouts are deterministic ODE samples of the old policy (no log-prob is ever computed);
    each update re-noises every final sample at a random 99% (rounded down) of the schedule times with fresh
    noise and trains the negative-aware flow-matching loss (loss family ``nft``) against the old policy (anchor
    policy ``nft_ema``, updated once per update) plus a small velocity KL to pi_0 (``nft_reference``).
    """

    paper = "DiffusionNFT: Online Diffusion Reinforcement with Forward Process (Zheng et al., 2025)"
    source = ("NVlabs/DiffusionNFT: scripts/train_nft_sd3.py, config/nft.py (sd3_geneval); this project's reading: "
              "Euler ODE rollouts, not the official dpm2 multistep solver")
    step_rule = "ODE rollouts of the old policy; the NFT loss at int(0.99 T) random schedule times of each sample"
    loss_family = "nft"
    rollout_anchor = OLD
    revision = 1  # 1: rollouts from the old policy, old policy per update, KL to pi_0, int(0.99 T) times, global std
    Params = NFTParams

    defaults = MethodConfig(
        kernel="ode",
        noise_level=0.0,
        logprob="gaussian",
        train_fraction=0.99,  # timestep_fraction (base.py:87), rounded down (trained_count)
        shared_noise=False,
        clip_range=1e-4,  # unused
        kl="none",
        equalizer=False,
        adv_norm="global",  # sample.global_std = True (base.py:57): std of all rewards + 1e-4 (stat_tracking.py:28)
    )

    def check_run(self, sigmas, run):
        if self.config.kl not in (None, "none"):  # a trust region it cannot act on would sit in a table as a zero
            raise UserError(f"method {self.name!r} computes no log-probs (loss family 'nft'), so a KL trust region "
                            f"would stay 0; got kl={self.config.kl!r}, allowed: none (its own KL to pi_0 is "
                            f"method.kl_beta)")
        super().check_run(sigmas, run)

    def eligible_steps(self, sigmas):
        """Every step: each is a time t = sigma_i at which the final sample is re-noised."""
        return torch.ones(len(sigmas) - 1, dtype=torch.bool)

    def trained_count(self, eligible):
        """``int(num_steps * timestep_fraction)`` (T.py:569): rounded down, at least 1."""
        return max(1, int(eligible * self.config.train_fraction))

    def anchor_policies(self):
        return {OLD: "nft_ema", **({REF: "nft_reference"} if self.params.kl_beta > 0 else {})}

    def anchor_params(self):
        p = self.params
        return {"flat": p.ema_flat, "uprate": p.ema_uprate, "uphold": p.ema_uphold}
