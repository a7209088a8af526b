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

Shipped methods live in ``methods/`` (installed as ``grpo_bench.methods``); other files load through
the entry-point group ``grpo_bench.plugins`` or the ``GRPO_BENCH_PLUGINS`` variable
(grpo_bench.registry). docs/adding_a_method.md walks through a complete example.
"""

from __future__ import annotations

from pydantic import Field

from grpo_bench.core.anchors import EMA, AnchorPolicy, EveryN, NeverUpdate, register_anchor_policy
from grpo_bench.core.method import Method, MethodConfig, register_method
from grpo_bench.core.sde import Kernel, ScheduleWarning, register_kernel, register_logprob
from grpo_bench.core.trust_region import KLInputs, KLVariant, analytic_kl, register_kl
from grpo_bench.errors import UserError
from grpo_bench.models.registry import register as register_model
from grpo_bench.params import PluginParams
from grpo_bench.rewards import register as register_reward

__all__ = [
    "EMA",
    "AnchorPolicy",
    "EveryN",
    "NeverUpdate",
    "Field",
    "KLInputs",
    "KLVariant",
    "Kernel",
    "Method",
    "MethodConfig",
    "PluginParams",
    "ScheduleWarning",
    "UserError",
    "analytic_kl",
    "register_anchor_policy",
    "register_kernel",
    "register_kl",
    "register_logprob",
    "register_method",
    "register_model",
    "register_reward",
]
