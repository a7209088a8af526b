"""What a run computes, in model passes (docs/statistics.md "Compute", docs/design.md §7): counted where the
calls are made (the closed form of the same counts from a run config is config/expected_compute.py).

The unit is the **sample-step pass**: one call of the generator's velocity network on one sample at one sampler
step. A classifier-free-guidance call runs its unconditional and conditional halves as one doubled batch
(core/sampling.py ``guided_velocity``), so it counts 2; a backward through a call counts as many units of its
own kind as the call had rows. Text encoding (cached once per run), decoding and reward scoring are not model
passes of the generator; their seconds are in ``time_reward`` and ``compute_seconds``.

``Compute`` is the counter a run carries in its ``TrainState`` (checkpointed with it). The phases receive it
and count the calls they make through counted views (``velocity``, ``view``): rollout, reference (KL anchor),
training, diagnostic and evaluation forwards, and the backwards of the training and diagnostic ones (a hook
on the call's output fires when autograd passes back through it: counted where the backward happens). The
counts are those of this process; ``totals`` sums them over the processes of a launch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from grpo_bench.config import metrics as m
from grpo_bench.core.loss import LossContext

VelocityFn = Callable[[Tensor, Tensor, Any], Tensor]


class Compute:
    """Sample-step passes by kind (``metrics.COMPUTE_COUNTS``) of this process since the run (or its resume)
    began, on top of the run totals a checkpoint restored; and the seconds of the training phases."""

    def __init__(self) -> None:
        self.local = dict.fromkeys(m.COMPUTE_COUNTS, 0)
        self.restored = dict.fromkeys(m.COMPUTE_COUNTS, 0)
        self.seconds = 0.0
        self.last: dict[str, int] = dict(self.restored)

    def add(self, kind: str, rows: int) -> None:
        self.local[kind] += int(rows)

    def velocity(self, fn: VelocityFn, kind: str, backward: str | None = None) -> VelocityFn:
        """``fn`` counted: each call adds its rows to ``kind``; when its output carries a gradient, the
        backward through it adds the same rows to ``backward`` (the hook returns nothing: the gradient is
        unchanged)."""

        def call(x: Tensor, sigma: Tensor, cond: Any) -> Tensor:
            out = fn(x, sigma, cond)
            rows = int(x.shape[0])
            self.add(kind, rows)
            if backward is not None and out.requires_grad:
                out.register_hook(lambda _grad: self.add(backward, rows))
            return out

        return call

    def view(self, model: Any, kind: str, backward: str | None = None) -> Counted:
        """``model`` (any generator, or its micro-batched view) with a counted ``velocity``."""
        return Counted(model, self.velocity(model.velocity, kind, backward))

    def loss_context(self, ctx: LossContext, forward: str, backward: str, reference: str) -> LossContext:
        """The loss context with its model and live anchors counted (training or diagnostic passes)."""
        return replace(ctx, model=self.view(ctx.model, forward, backward),
                       live_anchors={a: self.velocity(v, reference) for a, v in ctx.live_anchors.items()})

    def totals(self, acc: Any = None) -> dict[str, int]:
        """Run totals by kind over every process (a collective under a launch: every rank calls it),
        ``compute_training`` and ``compute_seconds`` (this process's) included."""
        local = [self.local[k] for k in m.COMPUTE_COUNTS]
        if acc is not None and acc.num_processes > 1:
            local = acc.reduce(torch.tensor(local, device=acc.device, dtype=torch.float64), "sum").tolist()
        self.last = {k: self.restored[k] + int(round(v)) for k, v in zip(m.COMPUTE_COUNTS, local)}
        return {**self.last, m.COMPUTE_TRAINING: sum(self.last[k] for k in m.TRAINING_COUNTS),
                m.COMPUTE_SECONDS: self.seconds}

    # --- checkpoints: the run totals of the last ``totals`` call (every process's), and the seconds -----
    def state_dict(self) -> dict[str, float]:
        return {**self.last, m.COMPUTE_SECONDS: self.seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Totals a checkpoint saved; a checkpoint from before the counters restores zeros (and says so in the
        caller's docs: its compute then counts from the resume on)."""
        self.restored = {k: int(state.get(k, 0)) for k in m.COMPUTE_COUNTS}
        self.local = dict.fromkeys(m.COMPUTE_COUNTS, 0)
        self.last = dict(self.restored)
        self.seconds = float(state.get(m.COMPUTE_SECONDS, 0.0))


class Counted:
    """A generator whose ``velocity`` is counted; everything else is the generator's."""

    def __init__(self, model: Any, velocity: VelocityFn) -> None:
        self.model, self.velocity = model, velocity

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)
