"""One update's optimizer-step schedule as a recipe declares it (docs/real_models.md, *Optimizer steps as
each author runs them*): how many optimizer steps a rollout gets, how many samples and (sample, trained
step) pairs each step averages, and how many backward passes a process runs for it.

The numbers follow from the config alone (``step_every``, ``inner_epochs``, ``minibatches``, ``bestofn``,
the method's trained steps, the batch and the number of processes); ``micro_batch`` changes only how many
backward passes carry them, never a step (tests/train/test_recipe_schedule.py counts them on the trainer's own
loop and holds the paper suites against the official codes). ``check`` refuses a schedule the batch
cannot carry, in one line, before anything is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from grpo_bench.config.sections import MethodChoice
from grpo_bench.errors import UserError


@dataclass(frozen=True)
class Schedule:
    """Per update: optimizer steps, and per optimizer step the samples, pairs and backward passes."""

    steps_per_rollout: int  # optimizer steps one rollout gets (all processes step together)
    samples_per_step: int  # samples one optimizer step averages over, all processes together
    pairs_per_step: int  # (sample, trained step) pairs one optimizer step averages over, all processes
    backwards_per_step: int  # backward passes one process runs per optimizer step
    trained_steps: int  # K, trained steps per sample
    rows_per_process: int  # rollouts each process samples


@dataclass(frozen=True)
class UpdateShape:
    """What an update's schedule is made of: the run's batch and optimizer-step keys and its method, the section
    ``schedule`` and ``check`` read (``section(cfg, UpdateShape)``, config/sections.py)."""

    method_choice: MethodChoice
    steps: int
    shift: float
    prompts_per_update: int
    group_size: int
    bestofn: int
    step_every: str
    inner_epochs: int
    minibatches: int
    micro_batch: int


def trained_steps(shape: UpdateShape) -> int:
    """K: the trained steps per sample of the config's method (a fixed count per sample)."""
    from grpo_bench.core import schedule as sched

    method = shape.method_choice.build()
    return int(method.train_steps(sched.sigmas(shape.steps, shape.shift), 1, torch.Generator().manual_seed(0)).shape[1])


def schedule(shape: UpdateShape, processes: int = 1) -> Schedule:
    """The schedule of one update of ``shape`` on ``processes`` data-parallel processes (``check`` first)."""
    rows = shape.prompts_per_update * shape.group_size // processes
    kept = rows if not shape.bestofn else rows // shape.group_size * shape.bestofn
    K = trained_steps(shape)
    if shape.step_every == "micro_step":
        return Schedule(shape.inner_epochs * kept * K, processes, processes, 1, K, rows)
    samples = kept // shape.minibatches
    pairs = samples * K
    return Schedule(shape.inner_epochs * shape.minibatches, samples * processes, pairs * processes,
                    math.ceil(pairs / (shape.micro_batch or pairs)), K, rows)


def check(shape: UpdateShape, processes: int = 1, where: str = "") -> None:
    """A schedule the batch can carry: whole groups per process for best-of-n, an even n within the
    group, and a number of optimizer steps per pass that divides the trained rollouts of a process."""
    rows = shape.prompts_per_update * shape.group_size // max(processes, 1)
    if shape.bestofn:
        if shape.bestofn % 2 or shape.bestofn > shape.group_size:
            raise UserError(f"{where}config key 'bestofn' ({shape.bestofn}) must be even and at most group_size "
                            f"({shape.group_size}): the best and worst bestofn/2 rollouts of each group are trained")
        if shape.prompts_per_update % processes:
            raise UserError(f"{where}config key 'bestofn' needs whole groups on every process: prompts_per_update "
                            f"({shape.prompts_per_update}) must divide by the {processes} processes")
        rows = rows // shape.group_size * shape.bestofn
    if shape.step_every == "minibatch" and rows % shape.minibatches:
        raise UserError(f"{where}config key 'minibatches' ({shape.minibatches} optimizer steps per pass) does not "
                        f"divide the {rows} trained rollouts per process (prompts_per_update x group_size"
                        f"{' -> bestofn per group' if shape.bestofn else ''} / {processes} processes): each step "
                        "must average as many samples as the others")
