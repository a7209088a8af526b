"""What a run carries from one update to the next, and what a checkpoint saves and loads (checkpoint.py).

The phases (collect.py, optimize.py) take what they use as arguments; the state they change between updates
lives here: the trainable module with its optimizer (the stepper), the KL anchors, the KL weight, the
counters and the compute counter (compute.py). Nothing else of a run changes after it is built.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from grpo_bench.core.anchors import Anchors
from grpo_bench.core.kl_weight import AdaptiveKLWeight, ConstantKLWeight
from grpo_bench.errors import UserError
from grpo_bench.train.compute import Compute


class CorruptCheckpoint(UserError):
    """A checkpoint folder that cannot be read safely (torn, edited, pickled, of another format)."""


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
            if k not in self.__dataclass_fields__ or not isinstance(v, (int, float)) or isinstance(v, bool):
                raise CorruptCheckpoint(f"counters: unexpected entry {k!r}: {v!r}")
            setattr(self, k, type(getattr(self, k))(v))


@dataclass
class TrainState:
    """The mutable part of a run: checkpoint.save writes it, checkpoint.load restores it in place."""

    stepper: Any  # steppers.Stepper: the trainable module, its optimizer, backward and step
    anchors: Anchors  # the KL anchors' snapshots
    kl_weight: ConstantKLWeight | AdaptiveKLWeight
    counters: Counters = field(default_factory=Counters)
    compute: Compute = field(default_factory=Compute)  # model passes so far (compute.py), run totals
