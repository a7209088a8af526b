"""The trainable module of a diffusers adapter: ``VelocityNet`` maps (x, sigma, cond) to the velocity the
pipeline's transformer predicts, exactly as the diffusers pipeline feeds it, and ``TextCond`` is the
prompt conditioning it takes.

* timestep = sigma * num_train_timesteps (1000), as ``FlowMatchEulerDiscreteScheduler`` sets
  ``timesteps = sigmas * 1000``;
* velocity sign: the scheduler's Euler step is ``x' = x + (sigma' - sigma) * model_output``, i.e.
  ``x - Delta * v`` with v = model_output; the harness's ODE step is the same, so v is the raw output;
* bf16: the transformer runs under ``torch.autocast``; its output is returned in float32 so kernels
  and log-probs stay float32.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

NUM_TRAIN_TIMESTEPS = 1000


class TextCond(dict):
    """Prompt conditioning: a dict of named tensors (embeddings, masks), each batched along dim 0.
    A plain dict subclass, so the rollout's pytree helpers (cat/index) handle it as any dict."""

    def __len__(self) -> int:  # the batch size, not the number of keys
        return next(iter(self.values())).shape[0]

    def rows(self, idx: Any) -> TextCond:
        if isinstance(idx, int):
            idx = slice(idx, idx + 1)
        return TextCond({k: v[idx] for k, v in self.items()})

    def repeat_interleave(self, n: int) -> TextCond:
        return TextCond({k: v.repeat_interleave(n, dim=0) for k, v in self.items()})

    @staticmethod
    def cat(conds: Sequence[Any]) -> TextCond:
        keys = list(conds[0].keys())
        return TextCond({k: torch.cat([c[k] for c in conds], dim=0) for k in keys})


class VelocityNet(nn.Module, ABC):
    """forward(x, sigma, cond) -> v: the module RL trains. Wraps the pipeline's transformer so
    ``torch.func.functional_call(net, params, (x, sigma, cond))`` evaluates the velocity under any
    snapshot of the trainable parameters. Subclasses build the transformer's keyword arguments."""

    def __init__(self, transformer: nn.Module, autocast_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.transformer = transformer
        self.autocast_dtype = autocast_dtype

    @abstractmethod
    def transformer_inputs(self, x: Tensor, timestep: Tensor, cond: TextCond, dtype: torch.dtype) -> dict[str, Any]:
        """Keyword arguments of the transformer call, exactly as the pipeline builds them."""

    def forward(self, x: Tensor, sigma: Tensor, cond: TextCond) -> Tensor:
        # x: [B, C, F, H, W] (normalised latents), sigma: [B] -> v: [B, C, F, H, W] float32
        timestep = sigma.float() * NUM_TRAIN_TIMESTEPS  # scheduler: timesteps = sigmas * 1000
        dtype = self.transformer.dtype  # the pipeline casts latents and embeddings to this
        kwargs = self.transformer_inputs(x.to(dtype), timestep, cond, dtype)
        ctx = (
            torch.autocast(x.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with ctx:
            out = self.transformer(**kwargs, return_dict=False)[0]
        return self.output(out, x).float()

    def output(self, out: Tensor, x: Tensor) -> Tensor:
        """The transformer's output in the latents' layout (video transformers: already [B, C, F, H, W];
        the image nets put back the frame axis and unpack tokens, models/diffusers_image.py)."""
        return out
