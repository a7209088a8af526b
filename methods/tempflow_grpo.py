"""TempFlow-GRPO (He et al., 2025): branch a group at one step of a shared ODE trajectory, weight steps by their noise.

From the paper (arXiv:2508.04324), not verified against code: its repository (Shredded-Pork/TempFlow-GRPO) holds
a README announcing the code, no code.
"""

import torch

from grpo_bench.api import (
    Method,
    MethodConfig,
    RatioInputs,
    RuleSpec,
    RunShape,
    UserError,
    clipped_policy_loss,
    register_method,
    register_objective,
)


@register_objective("noise_weighted")
def noise_weighted_objective(inp: RatioInputs, params=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped surrogate times std_i / mean(std over the schedule's stochastic steps): a step's weight follows
    the noise it injects (its exploration), 1 on average over the steps that can branch."""
    stochastic = inp.table_std[inp.table_std > 0]
    scale = inp.std / stochastic.mean()
    return clipped_policy_loss(inp.logp, inp.logp_old, inp.adv, inp.weight * scale, inp.clip_range)


@register_method("tempflow_grpo")
class TempFlowGRPO(Method):
    """TempFlow-GRPO.

    Trajectory branching: the G rollouts of a prompt share one initial noise and one ODE trajectory up to a
    branching step k, drawn per update among the trainable steps; the kernel ``flow`` draws the G branches
    at k and the ODE finishes each, so each final reward is credited to step k alone, the one trained step.
    The loss at k is weighted by the step's noise (objective ``noise_weighted``). From the paper; its code
    was not published.
    """

    paper = "TempFlow-GRPO: When Timing Matters for GRPO in Flow Models (He et al., 2025)"
    source = "paper (arXiv:2508.04324), not verified against code: Shredded-Pork/TempFlow-GRPO publishes none"
    step_rule = "one branching step per update, random among 0..T-2; the shared ODE prefix computed once per group"
    objective = "noise_weighted"
    share_prefix = True

    defaults = MethodConfig(
        kernel="flow",
        noise_level=0.7,
        logprob="gaussian",
        shared_noise=True,  # branching needs the group on one trajectory
        clip_range=1e-4,
        kl="flow_grpo",  # its Flow-GRPO base, as that code computes it (this project's reading: no code published)
        equalizer=False,
    )

    def own_step_rule(self) -> RuleSpec:
        """One branching step per update (core/step_rules.py ``branch``)."""
        return RuleSpec("branch")

    def check_run(self, sigmas, run: RunShape) -> None:
        if run.group_size < 2 or not run.shared_noise:
            raise UserError(f"method {self.name!r} branches the G rollouts of a prompt from one ODE trajectory: it "
                            f"needs group_size >= 2 and shared_noise: true (got group_size={run.group_size}, "
                            f"shared_noise={str(run.shared_noise).lower()})")
        if not self.eligible_steps(sigmas).any():
            raise UserError(f"method {self.name!r}: no step to branch at with steps={len(sigmas) - 1}")
        super().check_run(sigmas, run)  # a step rule a run chose instead refuses what it cannot train
