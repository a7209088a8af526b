"""Parameters that may be FSDP2 shards (DTensors): what the core's anchors and diagnostics need.

Plain tensors pass through every helper unchanged, so single-process code pays nothing. The
sharding itself (``fully_shard``, launch detection, optimizer state) is the trainer's business
(``grpo_bench.train.sharding``, which re-exports these helpers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor, nn


def reshard(module: nn.Module) -> None:
    """Free every FSDP unit's all-gathered parameters, so the next forward gathers the shards anew."""
    from torch.distributed.fsdp import FSDPModule

    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def is_sharded(params: Iterable[Tensor]) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in params)


# --- tensors -------------------------------------------------------------------------------------
def local(t: Tensor) -> Tensor:
    """This rank's shard of a DTensor (sharing its storage); a plain tensor itself."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def full(t: Tensor) -> Tensor:
    """The whole tensor of a DTensor (all-gather: every rank must call it); a plain tensor itself."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


@torch.no_grad()
def load_into(target: Tensor, value: Tensor) -> None:
    """Copy a full tensor into target (for a DTensor: into its local shard; no communication)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(target, DTensor):
        part = distribute_tensor(value.to(target.device, target.dtype), target.device_mesh, target.placements,
                                 src_data_rank=None)  # None: each rank slices its own copy
        target.to_local().copy_(part.to_local())
    else:
        target.copy_(value)


@contextlib.contextmanager
def swapped(module: nn.Module, params: dict[str, Tensor], values: dict[str, Tensor]) -> Iterator[None]:
    """Inside the block the module computes with ``values`` (same names and shards as ``params``):
    they are copied into the parameters' local shards in place, and the originals copied back after.
    FSDP units are resharded on entry and exit so no stale all-gathered copy is used."""
    with torch.no_grad():
        reshard(module)
        saved = {n: local(p).clone() for n, p in params.items()}  # one shard's worth of memory
        for n, p in params.items():
            local(p).copy_(local(values[n]))
        try:
            yield
        finally:
            reshard(module)
            for n, p in params.items():
                local(p).copy_(saved[n])


def grad_norm(params: list[Tensor]) -> float:
    """|grad| over all parameters (and all shards); 0 when no gradient exists."""
    grads = [p.grad for p in params if p.grad is not None]
    return float(full(torch.nn.utils.get_total_norm(grads))) if grads else 0.0


