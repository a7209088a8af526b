"""How one launch turns the GRPO loop's backward passes into one optimizer step.

The loop (optimize.py) accumulates several backward passes per optimizer step (micro-batches ×
trained steps), then steps once. What differs between launches is where gradients live, how they are
averaged over the ranks, who clips and who owns the optimizer state. Each launch is one registered
class with the same four calls:

    stepper.zero_grad()
    stepper.backward(loss, last=False)  # ... every pass but the last
    stepper.backward(loss, last=True)
    grad_norm = stepper.step()          # average over ranks, clip to max_grad_norm, optimizer step

- ``replicated`` (no launch, ``single_gpu``, ``multi_gpu``): full parameters on every rank; the
  gradients are all-reduced (mean) once per step by ``distributed.average_gradients`` (the module is
  not DDP-wrapped: ``velocity`` calls it directly), clipped by accelerate.
- ``fsdp2``: the module is sharded first (sharding.py); FSDP reduce-scatters the gradients itself (a mean
  over every process; under sequence parallelism multiplied by sp: summed in a group, averaged over groups).
- ``deepspeed`` (``deepspeed_zero2``): accelerate wraps the module and the optimizer in a DeepSpeed
  engine; ZeRO stage 2 partitions gradients and optimizer state over the ranks. The engine is told
  which backward closes the step (``set_gradient_accumulation_boundary``), scales nothing
  (``scale_wrt_gas=False``: our losses are already means), clips to the run's ``max_grad_norm``
  and saves its own partitioned checkpoint through ``Accelerator.save_state``.
  Precision is the run's, as under the other launches: DeepSpeed keeps fp32 weights and the
  trainer's own ``torch.autocast`` runs bf16 kernels (``autocast``), so a ZeRO-2 run computes what
  the replicated run computes (the test checks it to float rounding).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from grpo_bench.config.sections import Optimisation
from grpo_bench.errors import UserError
from grpo_bench.registry import Registry
from grpo_bench.train import distributed, optimizers, sharding

STEPPERS: Registry[type[Stepper]] = Registry("launch stepper")


def deepspeed_requested() -> bool:
    """True inside a process launched with a DeepSpeed accelerate config (``deepspeed_zero2``)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def check_launch(mixed_precision: str) -> None:
    """Fail before any model is built on a launch the trainer cannot honour (one-line UserErrors)."""
    if deepspeed_requested():
        distributed.require_deepspeed()
        if mixed_precision == "fp16":
            raise UserError("mixed_precision: fp16 is not supported with the deepspeed_zero2 accelerate config "
                            "(the trainer autocasts without a loss scaler); use bf16 or no")
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and mixed_precision == "fp16":
        raise UserError("mixed_precision: fp16 is not supported with the fsdp2 accelerate config "
                        "(no sharded gradient scaler); use bf16 or no")


def launch_kind(acc: Any) -> str:
    if deepspeed_requested():
        return "deepspeed"
    return "fsdp2" if sharding.fsdp2_requested(acc) else "replicated"


def allow_precision(mixed_precision: str) -> None:
    """Let one process train runs of different precisions one after another (a notebook, the tests):
    accelerate keeps one precision per process, so a single-process state of another precision is reset.
    A launch's ranks all run the same config and are never reset."""
    from accelerate.state import AcceleratorState

    held = AcceleratorState._shared_state.get("_mixed_precision")
    single = AcceleratorState._shared_state.get("num_processes", 1) == 1
    if held is not None and held != mixed_precision and single and not deepspeed_requested():
        AcceleratorState._reset_state()


def accelerator_kwargs(mixed_precision: str, cpu: bool) -> dict[str, Any]:
    """Arguments of the trainer's ``Accelerator`` for this launch (``mixed_precision`` resolved: no 'auto')."""
    if not deepspeed_requested():
        return {"mixed_precision": mixed_precision, "cpu": cpu}
    from accelerate.utils import InitProcessGroupKwargs

    # mixed_precision "no": DeepSpeed's own bf16 mode would cast the weights to bf16; the trainer
    # autocasts instead (Stepper.autocast). accelerate runs DeepSpeed only with cpu=False; without CUDA
    # it then finds no backend, so gloo is named (that is how the tests run ZeRO-2 on two CPU processes).
    handlers = [] if torch.cuda.is_available() else [InitProcessGroupKwargs(backend="gloo")]
    return {"mixed_precision": "no", "cpu": False, "kwargs_handlers": handlers}


@dataclass(frozen=True)
class StepperOptions:
    """What a stepper reads of the run (its section: ``section(cfg, StepperOptions)``, config/sections.py): the
    optimizer's section, clipping, the resolved compute precision, the sequence-parallel degree, and the model's
    name for its one error."""

    optimisation: Optimisation
    max_grad_norm: float
    mixed_precision: str
    sequence_parallel: int
    model: str


class Stepper:
    """Replicated parameters: all-reduce (mean) of the gradients once per optimizer step."""

    def __init__(self, acc: Any, module: nn.Module, options: StepperOptions) -> None:
        self.acc, self.module, self.options = acc, module, options
        self.params = self._trainable()
        self.optimizer = acc.prepare(self._adamw())

    def _trainable(self) -> list[Tensor]:
        params = [p for p in self.module.parameters() if p.requires_grad]
        if not params:
            raise UserError(f"model {self.options.model!r}: trainable_module() has no parameter with requires_grad")
        return params

    def _adamw(self) -> torch.optim.Optimizer:
        """The run's optimizer (AdamW, or Muon with AdamW beside it: optimizers.py)."""
        return optimizers.build(self.module, self.params, self.options.optimisation)

    engine_checkpoint = False
    """True when the launch's engine saves its own state (through ``Accelerator.save_state``)."""

    def optimizer_state(self) -> dict[str, Any] | None:
        """The optimizer's state for checkpoint.py (tensors and plain values; every rank calls it)."""
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def autocast(self) -> contextlib.AbstractContextManager:
        return self.acc.autocast()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: Tensor, last: bool) -> None:
        self.acc.backward(loss)

    def step(self) -> float:
        """Average, clip, step; the total gradient norm before clipping."""
        # summed over a sequence-parallel group, averaged over the groups (distributed.py)
        dp = distributed.data_parallel(self.acc, self.options.sequence_parallel)
        distributed.average_gradients(self.params, dp)
        norm = float(self.acc.clip_grad_norm_(self.params, self.options.max_grad_norm))
        self.optimizer.step()
        return norm


STEPPERS.register("replicated")(Stepper)


@STEPPERS.register("fsdp2")
class FSDP2Stepper(Stepper):
    """FSDP2 shards: the module is sharded before its parameters (DTensors) and the optimizer exist;
    FSDP reduce-scatters (averages) the gradients during backward."""

    def __init__(self, acc: Any, module: nn.Module, options: StepperOptions) -> None:
        self.acc, self.module, self.options = acc, module, options
        sharding.shard_module(module, acc.device, acc.num_processes)
        self.params = self._trainable()
        self.optimizer = self._adamw()

    def optimizer_state(self) -> dict[str, Any] | None:  # gathered: a plain state_dict holds rank 0's shards
        return sharding.ShardedOptimizerState(self.module, self.optimizer).state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        sharding.ShardedOptimizerState(self.module, self.optimizer).load_state_dict(state)

    def step(self) -> float:
        sp = self.options.sequence_parallel
        if sp > 1:  # FSDP averaged over all W processes; a group's partial gradients want sum / (W / sp)
            for p in self.params:  # (a custom divide factor needs PREMUL_SUM, which gloo lacks)
                if p.grad is not None:
                    p.grad.mul_(sp)
        norm = sharding.clip_grad_norm(self.params, self.options.max_grad_norm)
        self.optimizer.step()
        return norm


@STEPPERS.register("deepspeed")
class DeepSpeedStepper(Stepper):
    """A DeepSpeed engine (ZeRO stage 2 with the shipped config) owns reduction, clipping and the step."""

    def __init__(self, acc: Any, module: nn.Module, options: StepperOptions) -> None:
        self.acc, self.module, self.options = acc, module, options
        ds = acc.state.deepspeed_plugin.deepspeed_config
        stage = int(ds.get("zero_optimization", {}).get("stage", 0))
        if stage > 2:  # ZeRO-3 partitions the weights, and the trainer calls the module outside the engine
            raise UserError(f"accelerate config: deepspeed_config.zero_stage {stage} is not supported; use 0, 1 or 2 "
                            "(grpo_bench/configs/deepspeed_zero2.yaml), or --accelerate-config fsdp2 to shard weights")
        self.params = self._trainable()
        # The run config, not the launch file, sets clipping; no DeepSpeed dataloader exists, so the
        # nominal batch is one sample a rank and the loop owns accumulation (boundary set per backward).
        ds.update(gradient_clipping=options.max_grad_norm, gradient_accumulation_steps=1,
                  train_micro_batch_size_per_gpu=1, train_batch_size=acc.num_processes)
        self.engine, self.optimizer = acc.prepare(module, self._adamw())

    engine_checkpoint = True  # ZeRO partitions: the engine saves them (checkpoint.py loads them weights_only)

    def optimizer_state(self) -> dict[str, Any] | None:
        return None

    def autocast(self) -> contextlib.AbstractContextManager:
        bf16 = self.options.mixed_precision == "bf16"
        return torch.autocast(self.acc.device.type, dtype=torch.bfloat16, enabled=bf16)

    def zero_grad(self) -> None:
        self.engine.zero_grad()

    def backward(self, loss: Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        return float(self.engine.get_global_grad_norm())


def make_stepper(acc: Any, module: nn.Module, options: StepperOptions) -> Stepper:
    """The launch's stepper, built from its own section (``StepperOptions``)."""
    return STEPPERS.get(launch_kind(acc))(acc, module, options)
