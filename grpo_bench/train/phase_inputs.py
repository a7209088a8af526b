"""What the collect and optimise phases read from the run they belong to (train/collect.py, optimize.py).

A structural type, not the Trainer: the phases depend on these attributes alone, so they never import
the trainer (no import circle, TYPE_CHECKING included: tests/test_import_graph.py), and a test or
another loop can drive a phase with any object that has them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import torch

from grpo_bench.core.loss import LossContext
from grpo_bench.core.method import Method
from grpo_bench.core.rollout import StepTable
from grpo_bench.core.trust_region import Anchors


class PhaseInputs(Protocol):
    cfg: Any  # the run config (RunConfig)
    device: torch.device
    acc: Any  # accelerate.Accelerator: process index, collectives
    model: Any  # the generator (models/base.py VideoModel)
    sampler: Any  # the generator behind micro-batching (rollout and eval forwards)
    reward: Any
    method: Method
    sigmas: torch.Tensor
    table: StepTable
    stored: torch.Tensor  # Long[S] the steps a rollout keeps
    anchors: Anchors
    shard: slice  # this process's rows of the global batch
    train_prompts: list[str]
    stepper: Any  # steppers.Stepper: zero_grad / backward / step
    params: list[torch.Tensor]
    ctx: LossContext
    kl_weight: Any  # core/kl_weight.py ConstantKLWeight | AdaptiveKLWeight
    counters: Any  # checkpoint.Counters
    probe: Any  # landing.WeightProbe: which trainable elements the update's optimizer steps change
    autocast: Callable[[], contextlib.AbstractContextManager]
