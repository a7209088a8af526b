"""What a loss family may read: the two views core hands a registered loss family (docs/adding_a_method.md §7).

A family (``register_loss_family``, core/loss.py) is ``f(samples, velocity, params) -> StepTerms``:

* ``samples`` (``LossSamples``): b samples of the update's rollout, each at the step it trains in this call;
* ``velocity`` (``LossVelocities``): the model calls the loss may make at those samples, the trained policy's and
  its method's own anchors', guided as the rollout was;
* ``params``: the method's own parameters (``method.*``).

That is all a likelihood-free family (DiffusionNFT's) reads, and all a plug-in family gets: neither view exposes
the rollout's stored transitions, the run's step table, the model or the run's settings, so core may change those
without touching a method file. Core builds both views from its own records for every call (core/loss.py
``family_views``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_bench.core.sampling import VelocityFn, guided_velocity

VelocityAt = Callable[[Tensor, Tensor], Tensor]
"""v(x: [b, C, F, H, W], sigma: [b]) -> [b, C, F, H, W], the conditioning of the b samples already bound."""


@dataclass(frozen=True)
class LossSamples:
    """b samples of one update's rollout, each at the step it trains in this call (row-aligned tensors)."""

    final: Tensor
    """[b, C, F, H, W] the final latents x_T of each sample's trajectory (the clean sample a likelihood-free loss
    re-noises), in the dtype the rollout stored them."""
    noise: Tensor | None
    """[b, C, F, H, W] N(0, I) the rollout drew for this (sample, step) after its trajectory, independent of it;
    drawn for a family registered with ``needs_logprob=False`` only, None otherwise."""
    sigma: Tensor
    """[b] float32 sigma_i of each sample's step i: the schedule time t at which the loss evaluates it."""
    advantages: Tensor
    """[b] each sample's group-normalised advantage A_j (docs/design.md §3), unclipped beyond the run's adv_clip."""
    weight: Tensor
    """[b] the equalizer S_i of each sample's step (ones when the equalizer is off): the factor of its loss."""


class LossVelocities:
    """The model calls a loss family may make at its b samples, each at the samples' prompts and guided as the
    rollout was (the run's guidance scale and ``guidance_formula``, one call on the doubled batch; under
    ``detach_uncond`` no gradient through the unconditional half of the policy's call).

    ``rows`` counts the model rows the calls have evaluated (a guided call evaluates two per sample): a family
    reports it as ``StepTerms.forward_rows``, so every forward is counted where it is made."""

    def __init__(self, policy: VelocityAt, anchors: Mapping[str, VelocityAt], rows_per_sample: int = 1) -> None:
        self._policy, self._anchors, self._rows_per_sample = policy, dict(anchors), rows_per_sample
        self.rows = 0

    @classmethod
    def guided(cls, policy: VelocityFn, anchors: Mapping[str, VelocityFn], cond: Any, null: Any, guidance: float,
               formula: str = "cfg", detach_uncond: bool = False) -> LossVelocities:
        """The calls of ``policy`` and ``anchors`` (v(x, sigma, cond)) at the conditioning ``cond`` of b samples,
        guided by ``guidance`` with the null conditioning ``null`` (core/sampling.py ``guided_velocity``)."""

        def at(velocity: VelocityFn, detach: bool) -> VelocityAt:
            return lambda x, sigma: guided_velocity(velocity, x, sigma, cond, null, guidance, detach, formula)

        return cls(at(policy, detach_uncond), {name: at(v, False) for name, v in anchors.items()},
                   2 if guidance != 1.0 else 1)

    @property
    def anchors(self) -> tuple[str, ...]:
        """The names ``anchor`` accepts: the method's own live anchors (``Method.anchor_policies``)."""
        return tuple(self._anchors)

    def policy(self, x: Tensor, sigma: Tensor) -> Tensor:
        """v_theta(x, sigma) of the trained policy, with gradient: x [b, C, F, H, W], sigma [b]."""
        self.rows += self._rows_per_sample * x.shape[0]
        return self._policy(x, sigma)

    def anchor(self, name: str, x: Tensor, sigma: Tensor) -> Tensor:
        """v(x, sigma) with the parameters of the method's anchor ``name`` (one of its ``anchor_policies()``
        whose policy is live), without gradient."""
        if name not in self._anchors:
            raise KeyError(f"loss family: no anchor {name!r}; the method's live anchors: "
                           f"{', '.join(self._anchors) or 'none'}")
        self.rows += self._rows_per_sample * x.shape[0]
        with torch.no_grad():
            return self._anchors[name](x, sigma)
