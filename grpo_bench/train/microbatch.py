"""Micro-batched model calls: at most ``micro_batch`` rows per transformer forward.

The rollout, the anchors' reference forwards and evaluation call ``model.velocity`` on whole
batches (twice the rows with classifier-free guidance). ``MicroBatched`` is a view of a model whose
velocity splits the batch into chunks of ``size`` rows and concatenates the results, so the
memory of one forward is bounded by the run's ``micro_batch`` wherever the trainer samples. Rows are
independent in every supported transformer, so the result equals the unbatched one up to
floating-point reassociation (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

VelocityFn = Callable[[Tensor, Tensor, Any], Tensor]


def index_rows(cond: Any, rows: slice) -> Any:
    """Rows of a conditioning (Tensor, or dict / list / tuple of them; dict subclasses keep their type)."""
    if isinstance(cond, Tensor):
        return cond[rows]
    if isinstance(cond, dict):
        return type(cond)({k: index_rows(v, rows) for k, v in cond.items()})
    if isinstance(cond, (list, tuple)):
        return type(cond)(index_rows(v, rows) for v in cond)
    return cond


def chunked(velocity: VelocityFn, size: int) -> VelocityFn:
    """``velocity`` evaluated on at most ``size`` rows at a time (size 0: unchanged)."""
    if size <= 0:
        return velocity

    def call(x: Tensor, sigma: Tensor, cond: Any) -> Tensor:
        n = x.shape[0]
        if n <= size:
            return velocity(x, sigma, cond)
        sigma = torch.as_tensor(sigma, device=x.device)
        sigma = sigma.expand(n) if sigma.ndim == 0 else sigma
        parts = [velocity(x[s : s + size], sigma[s : s + size], index_rows(cond, slice(s, s + size)))
                 for s in range(0, n, size)]
        return torch.cat(parts)

    return call


class MicroBatched:
    """A model whose ``velocity`` runs ``size`` rows per call; everything else is the model's."""

    def __init__(self, model: Any, size: int) -> None:
        self.model, self.size = model, int(size)
        self.velocity = chunked(model.velocity, self.size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


class WithVelocity:
    """A model whose ``velocity`` is another function (e.g. an anchor's parameters, already micro-batched);
    everything else (prompt encoding, decoding, shapes) is the model's."""

    def __init__(self, model: Any, velocity: VelocityFn) -> None:
        self.model, self.velocity = model, velocity

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)
