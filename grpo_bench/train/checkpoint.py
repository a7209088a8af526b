"""Resumable training state on accelerate: atomic checkpoint folders under ``out_dir/checkpoints``.

``Accelerator.save_state`` writes the optimizer, the RNG states and every object registered with
``register_for_checkpointing``: here the trainable parameters, the KL anchors, the KL weight
controller and the counters. A checkpoint is written to a hidden temp folder and renamed into
place (``os.replace``), so a killed run leaves only complete checkpoints; older ones are pruned.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torch import nn

from grpo_bench.train import sharding

CHECKPOINTS = "checkpoints"
_NAME = re.compile(r"^update_(\d+)$")


class TrainableState:
    """The trainable parameters of a module (requires_grad only) as a checkpointable object."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}

    def state_dict(self) -> dict[str, Any]:
        """Full tensors on the CPU (FSDP2 shards are gathered: every rank must call it)."""
        return {n: sharding.full(p.detach()).cpu().clone() for n, p in self.params.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = sorted(set(self.params) - set(state))
        if missing:
            raise ValueError(f"checkpoint lacks trainable parameter(s) {missing[:3]}…")
        for n, p in self.params.items():
            sharding.load_into(p.data, state[n])  # a sharded parameter takes its own slice
        if sharding.is_sharded(self.params.values()):
            sharding.reshard(self.module)  # no stale all-gathered copy survives the load


@dataclass
class Counters:
    """Where the run stands: completed updates, optimizer steps, anchor copies, wall time so far."""

    update: int = 0
    optimizer_steps: int = 0
    anchor_copies: int = 0
    wall_time: float = 0.0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def latest(out_dir: Path) -> tuple[int, Path] | None:
    """(update, folder) of the newest complete checkpoint, or None."""
    root = Path(out_dir) / CHECKPOINTS
    found = [(int(m.group(1)), p) for p in root.glob("update_*") if (m := _NAME.match(p.name)) and p.is_dir()]
    return max(found) if found else None


def save(accelerator: Any, out_dir: Path, update: int, keep: int = 1) -> Path:
    """accelerate state after `update` completed updates; atomic; keeps the newest `keep` checkpoints."""
    root = Path(out_dir) / CHECKPOINTS
    final = root / f"update_{update:06d}"
    tmp = root / f".tmp-update_{update:06d}"  # one name for all processes: each writes its own files
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if final.exists():  # re-saving the same point after a crash: replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        for _, path in sorted((x for x in _all(root) if x[0] != update), reverse=True)[max(keep - 1, 0):]:
            shutil.rmtree(path, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def _all(root: Path) -> list[tuple[int, Path]]:
    return [(int(m.group(1)), p) for p in root.glob("update_*") if (m := _NAME.match(p.name))]


def clear(out_dir: Path) -> None:
    shutil.rmtree(Path(out_dir) / CHECKPOINTS, ignore_errors=True)
