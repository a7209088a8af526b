"""The public plug-in API: everything a method file (or an installed plug-in package) imports.

A new GRPO variant is one file that imports only this module (and torch/math)::

    from grpo_bench.api import Kernel, Method, MethodConfig, PluginParams, register_kernel, register_method

    @register_kernel("gamma")
    class GammaKernel(Kernel):
        class Params(PluginParams):
            gamma: float = 0.5
        def variance(self, sigma, sigma_next, sigma_1):
            return self.noise_level**2 * (sigma - sigma_next) ** self.params.gamma

    @register_method("gamma_grpo")
    class GammaGRPO(Method):
        defaults = MethodConfig(kernel="gamma", noise_level=0.5, kl="fixed")

A method changes the rest of a run only through declared hooks (core/method.py): its step rule
(``Method.own_step_rule`` returning a ``RuleSpec`` of a registered rule, ``register_step_rule``), a shared ODE
prefix per group (``share_prefix``), a per-step ratio objective
(``register_objective``, ``RatioInputs``), a loss family that may need no log-prob (``register_loss_family``:
it reads ``LossSamples`` and ``LossVelocities``, the narrow views of core/loss_views.py, and returns
``StepTerms``), anchors of its own (``anchor_policies``) and its refusals
(``check_run``, ``RunShape``).

A generator registers a factory ``factory(pretrained=True, section: ModelSection | None = None, **kw)`` with
``register_model(name, modality=...)``; ``section`` is all it reads of a run (docs/design.md, the model protocol).

Shipped methods live in ``methods/`` (installed as ``grpo_bench.methods``); other files load through
the entry-point group ``grpo_bench.plugins`` or the ``GRPO_BENCH_PLUGINS`` variable
(grpo_bench.registry). docs/adding_a_method.md walks through a complete example.
"""

from __future__ import annotations

from pydantic import Field

from grpo_bench.core.anchors import EMA, AnchorPolicy, EveryN, NeverUpdate, register_anchor_policy
from grpo_bench.core.loss import RatioInputs, StepTerms, clipped_policy_loss, register_loss_family, register_objective
from grpo_bench.core.loss_views import LossSamples, LossVelocities
from grpo_bench.core.method import Method, MethodConfig, RunShape, register_method
from grpo_bench.core.sde import Kernel, ScheduleWarning, register_kernel, register_logprob
from grpo_bench.core.step_rules import RuleSpec, StepRule, register_step_rule
from grpo_bench.core.trust_region import KLInputs, KLVariant, analytic_kl, register_kl
from grpo_bench.errors import UserError
from grpo_bench.models.options import ModelSection
from grpo_bench.models.registry import register as register_model
from grpo_bench.params import PluginParams
from grpo_bench.rewards import register as register_reward
from grpo_bench.rewards.base import Reward

__all__ = [
    "EMA",
    "AnchorPolicy",
    "EveryN",
    "NeverUpdate",
    "Field",
    "KLInputs",
    "KLVariant",
    "Kernel",
    "LossSamples",
    "LossVelocities",
    "Method",
    "MethodConfig",
    "ModelSection",
    "PluginParams",
    "RatioInputs",
    "Reward",
    "RuleSpec",
    "RunShape",
    "ScheduleWarning",
    "StepRule",
    "StepTerms",
    "UserError",
    "analytic_kl",
    "clipped_policy_loss",
    "register_anchor_policy",
    "register_kernel",
    "register_kl",
    "register_logprob",
    "register_loss_family",
    "register_method",
    "register_model",
    "register_objective",
    "register_reward",
    "register_step_rule",
]
