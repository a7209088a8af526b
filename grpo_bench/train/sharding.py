"""FSDP2 sharding of the trainable module (the ``fsdp2`` accelerate config), and what the trainer
needs to handle sharded parameters.

Under an FSDP2 launch the trainer calls ``shard_module`` before it collects its parameters or
builds the optimizer: ``torch.distributed.fsdp.fully_shard`` on each repeated block (the classes a
diffusers model lists in ``_no_split_modules``, the world UNet its ResBlocks), then on the trainable
module itself. Every parameter of that module (LoRA: the frozen base weights too) becomes a DTensor
sharded along dim 0 over the ranks; a block's full weights exist only while it runs. Gradients are
reduce-scattered (averaged over the ranks) by FSDP itself, so the trainer's manual
``average_gradients`` is skipped; the optimizer state lives with the local shards.

We call ``fully_shard`` ourselves instead of ``Accelerator.prepare(module)``: accelerate never
builds an FSDP state on CPU (it falls back to MULTI_CPU/gloo and ignores the FSDP launch settings),
so its path could not be tested here, and one code path serves CPU tests and GPUs alike. Precision
stays with the model (``acc.autocast`` and the adapters' own autocast, no MixedPrecisionPolicy), so
a sharded run computes what the plain data-parallel run computes.

Helpers for code that touches parameters: ``full`` (the whole tensor of a shard, a collective),
``load_into`` (copy a full tensor into a parameter's local shard, no communication), ``swapped``
(evaluate the module with other parameter values in place; ``functional_call`` is not safe under
FSDP, whose pre-forward hook swaps its own all-gathered parameters in), ``clip_grad_norm``, and
``ShardedOptimizerState`` (the optimizer's full state for checkpoint.py).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from torch import Tensor, nn

from grpo_bench.core.dtensors import full, grad_norm, is_sharded, load_into, local, reshard, swapped
from grpo_bench.errors import UserError

__all__ = [
    "ShardedOptimizerState", "clip_grad_norm", "fsdp2_requested", "full", "grad_norm", "is_sharded", "load_into",
    "local", "reshard", "shard_module", "shard_units", "swapped",
]


# --- which launch ------------------------------------------------------------------------------
def fsdp2_requested(acc: Any) -> bool:
    """True when the run was launched with an FSDP (version 2) accelerate config.

    On GPUs accelerate reports ``DistributedType.FSDP``; on CPU it builds a MULTI_CPU (gloo) state and
    ignores the FSDP settings, which ``accelerate launch`` still exports (ACCELERATE_USE_FSDP,
    FSDP_VERSION), so those are read too: that is how the tests run FSDP2 on two CPU processes."""
    from accelerate.utils import DistributedType

    if acc.distributed_type == DistributedType.FSDP:
        version = int(getattr(acc.state.fsdp_plugin, "fsdp_version", 1))
    elif os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        version = int(os.environ.get("FSDP_VERSION", "1"))
    else:
        return False
    if version != 2:
        raise UserError(f"accelerate config: fsdp_version {version} is not supported; set fsdp_config.fsdp_version: 2 "
                        "(grpo_bench/configs/fsdp2.yaml)")
    return True


# --- sharding ----------------------------------------------------------------------------------
def shard_units(module: nn.Module) -> list[nn.Module]:
    """The repeated blocks to shard one by one (each is all-gathered only while it runs): modules whose
    class a (sub)module lists in ``_no_split_modules`` (diffusers' transformer blocks, the world UNet's
    ResBlocks). A module declaring none is sharded as one unit."""
    names = {n for m in module.modules() for n in (getattr(m, "_no_split_modules", None) or ())}
    return [m for m in module.modules() if type(m).__name__ in names]


def shard_module(module: nn.Module, device: torch.device, world: int) -> nn.Module:
    """fully_shard the repeated blocks, then the module (in place; returns it). Parameters must already
    sit on ``device``; every rank must call this with the same module."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    # FSDP warns when a unit returns a view (an in-place op on it would skip its pre-backward hook);
    # the velocity nets return views of the transformer output, and nothing here modifies one in place.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    # True: resharding after every forward keeps one block's full weights alive at a time, and makes
    # the root reshard too, so an in-place change of the shards (anchors, checkpoint load) is seen
    # by the next forward.
    reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() != "false"
    kw: dict = {}
    if any(p.requires_grad and p.dtype == torch.bfloat16 for p in module.parameters()):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        # bf16 trained weights (param_dtype: bf16): reduce-scatter the gradients in float32
        kw["mp_policy"] = MixedPrecisionPolicy(reduce_dtype=torch.float32)
    for unit in shard_units(module):
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard, **kw)
    fully_shard(module, mesh=mesh, reshard_after_forward=reshard, **kw)
    return module


def clip_grad_norm(params: list[Tensor], max_norm: float) -> float:
    """torch's clip_grad_norm_ on DTensor gradients (norm over all shards); the total norm as a float."""
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return float(full(total))


class ShardedOptimizerState:
    """The optimizer of sharded parameters as a checkpointable object: ``state_dict`` gathers the full
    state (keyed by parameter name, on rank 0; accelerate writes it from there), ``load_state_dict``
    gives every rank its shards back (torch.distributed.checkpoint's state-dict helpers)."""

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.module, self.optimizer = module, optimizer

    def _options(self, **kw: Any) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=True, **kw)

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(self.module, self.optimizer, options=self._options())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(self.module, self.optimizer, state, options=self._options(broadcast_from_rank0=True))
