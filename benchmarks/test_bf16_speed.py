"""The world under bf16 autocast against fp32, measured in one run (train/precision.py).

Reports, as pytest-benchmark extra_info:
- the model time of one GRPO update (rollout + optimise, the main table's shapes: P=2, G=8, T=10,
  3 trained steps, KL to the initial policy) at fp32 and at bf16, interleaved so machine load hits
  both alike, and their ratio;
- the U-Net's achieved GFLOP/s (FLOPs counted by torch's FlopCounterMode on a forward at the rollout's
  batch) at both precisions, beside this machine's bf16 and fp32 matmul rates (1024^2, one thread):
  how far the conv-bound world is from the hardware's bf16 limit;
- the convolution ceiling: every convolution call of one rollout forward, replayed alone in fp32 and in
  bf16 at its faster memory layout (contiguous or channels-last), summed. It bounds what any bf16 path of
  this U-Net can gain on this CPU, whatever the harness does around it; ``_train``: the same with the
  backward at a training minibatch's batch.

    python -m pytest benchmarks/test_bf16_speed.py -s -p no:randomly
"""

from __future__ import annotations

import copy
import time

import pytest
import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from grpo_bench import models
from grpo_bench.api import Reward
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.train.precision import has_bf16_units
from grpo_bench.train.trainer import Trainer

ROUNDS = 4


class StubReward(Reward):
    def __call__(self, videos, prompts):
        z = videos.flatten(1).mean(1)
        return {"vq": z, "mq": -z, "ta": z * 0.5}


def _best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _matmul_gflops(dtype: torch.dtype, n: int = 1024) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    return 2 * n**3 / _best(lambda: a @ b, 5) / 1e9


def _unet_gflops(model, batch: int, dtype: torch.dtype | None) -> float:
    x = torch.randn(batch, *model.latent_shape)
    sigma, cond = torch.full((batch,), 0.5), model.encode_prompts(["a red circle moving left"] * batch)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.velocity(x, sigma, cond)
    flops = counter.get_total_flops()

    def forward():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            model.velocity(x, sigma, cond)

    forward()
    return flops / _best(forward, 5) / 1e9


def _conv_calls(model, batch: int) -> list[tuple[nn.Module, Tensor]]:
    """(module, input) of every Conv3d / ConvTranspose3d call in one forward at ``batch``."""
    calls, hooks = [], []
    for module in model.net.modules():
        if isinstance(module, (nn.Conv3d, nn.ConvTranspose3d)):
            hooks.append(module.register_forward_hook(lambda m, args, out: calls.append((m, args[0].detach()))))
    x = torch.randn(batch, *model.latent_shape)
    with torch.no_grad():
        model.velocity(x, torch.full((batch,), 0.5), model.encode_prompts(["a red circle moving left"] * batch))
    for h in hooks:
        h.remove()
    return calls


def _conv_ceiling(model, batch: int, backward: bool = False) -> float:
    """Sum of fp32 times over sum of best-layout bf16 times of the forward's convolutions, each alone
    (with ``backward``: forward plus the input and weight gradients, as a training minibatch needs)."""

    def call(module: nn.Module, x: Tensor):
        if not backward:
            return lambda: module(x)
        x = x.detach().requires_grad_(True)

        def forward_backward():
            module.zero_grad(set_to_none=True)
            y = module(x)
            y.backward(torch.ones_like(y))

        return forward_backward

    fp32 = bf16 = 0.0
    with torch.set_grad_enabled(backward):
        for module, x in _conv_calls(model, batch):
            fp32 += _best(call(module, x), 5)
            layouts = []
            for fmt in (torch.contiguous_format, torch.channels_last_3d):
                m = copy.deepcopy(module).to(torch.bfloat16).to(memory_format=fmt)
                fn = call(m, x.to(torch.bfloat16).contiguous(memory_format=fmt))
                fn()
                layouts.append(_best(fn, 5))
            bf16 += min(layouts)
    return fp32 / bf16


@pytest.mark.benchmark
def test_bf16_against_fp32_update_time(benchmark, tmp_path):
    if not has_bf16_units(cpu=True):
        pytest.skip("this CPU has no bf16 units (AVX512-BF16 or AMX)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainers = {}
        for mp in ("no", "bf16"):
            cfg = resolve(RunConfig(device="cpu", diag_every=0, kl="fixed", mixed_precision=mp))
            model = models.build("world", pretrained=True)
            trainers[mp] = Trainer(cfg, tmp_path / mp, model, StubReward())
            trainers[mp].update(0)  # warm-up (allocator, oneDNN primitives)
        best = {mp: float("inf") for mp in trainers}
        for r in range(1, ROUNDS + 1):  # interleaved
            for mp, trainer in trainers.items():
                best[mp] = min(best[mp], _best(lambda t=trainer, u=r: t.update(u), 1))
        model = trainers["no"].model
        info = {
            "update_fp32_s": best["no"], "update_bf16_s": best["bf16"], "speedup": best["no"] / best["bf16"],
            "unet_gflops_fp32": _unet_gflops(model, 16, None),
            "unet_gflops_bf16": _unet_gflops(model, 16, torch.bfloat16),
            "matmul_gflops_fp32": _matmul_gflops(torch.float32), "matmul_gflops_bf16": _matmul_gflops(torch.bfloat16),
            "conv_ceiling_speedup": _conv_ceiling(model, 16),
            "conv_ceiling_speedup_train": _conv_ceiling(model, 24, backward=True),
        }
        benchmark.extra_info.update(info)
        benchmark.pedantic(trainers["bf16"].update, args=(ROUNDS + 1,), rounds=1, iterations=1)
        print("\n" + ", ".join(f"{k} {v:.3g}" for k, v in info.items()))
        assert info["speedup"] > 1.0  # bf16 that is slower than fp32 would be a regression worth seeing
    finally:
        torch.set_num_threads(threads)
