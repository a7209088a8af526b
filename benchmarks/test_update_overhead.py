"""Harness overhead: one GRPO update against a bare loop with the same model calls.

The bare loop makes exactly the calls an update makes, on the same batch shapes and under the same
autocast: per rollout step one no_grad forward of the policy on the whole batch, plus, for each KL
anchor, one forward on every (row, step) pair that trains this update; per optimizer step one
forward+backward on its minibatch's (row, trained step) pairs, and one AdamW step; no kernels,
log-probs, advantages, gathers or bookkeeping. The reward is a constant-time stub so the ratio
measures the harness.
Target: update / bare <= 1.15.

    OMP_NUM_THREADS=2 python -m pytest benchmarks/test_update_overhead.py -s -p no:randomly
"""

from __future__ import annotations

import time

import pytest
import torch

from grpo_bench import models
from grpo_bench.api import Reward
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.train.trainer import Trainer

ROUNDS = 5


class StubReward(Reward):
    def __call__(self, videos, prompts):
        z = videos.flatten(1).mean(1)
        return {"vq": z, "mq": -z, "ta": z * 0.5}


def _bare_loop(model, B, T, anchors, K, minibatches, opt, autocast):
    x = torch.randn(B, *model.latent_shape)
    sigma = torch.full((B * K,), 0.5)
    cond = model.encode_prompts(["a red circle moving left"] * B * K)
    with torch.no_grad(), autocast():
        for _ in range(T):
            model.velocity(x, sigma[:B], cond[:B])
        pairs = x.repeat_interleave(K, 0)
        for _ in range(anchors):
            model.velocity(pairs, sigma, cond)
    for rows in torch.arange(B * K).chunk(minibatches):
        opt.zero_grad(set_to_none=True)
        with autocast():
            v = model.velocity(pairs[rows], sigma[rows], cond[rows])
        v.float().square().mean().backward()
        opt.step()


@pytest.mark.benchmark
@pytest.mark.parametrize("preset", ["small", "default"])
def test_update_vs_bare_loop(benchmark, tmp_path, preset):
    torch.manual_seed(0)
    kw = dict(device="cpu", diag_every=0, kl="dual")
    if preset == "small":
        kw.update(steps=6, prompts_per_update=2, group_size=4)
    cfg = resolve(RunConfig(**kw))
    model = models.build("world", pretrained=False, size=cfg.video_size if cfg.video_size == 16 else 16)
    trainer = Trainer(cfg, tmp_path, model, StubReward())
    B = cfg.prompts_per_update * cfg.group_size
    K = trainer.method.train_steps(trainer.sigmas, B).shape[1]
    bare_opt = torch.optim.AdamW([p for p in model.trainable_module().parameters()], lr=0.0)  # lr 0: model unchanged

    trainer.update(0)  # warm-up (allocator, oneDNN primitives)
    bare = (model, B, cfg.steps, len(trainer.anchors.stored_names), K, cfg.minibatches, bare_opt, trainer.autocast)
    _bare_loop(*bare)
    harness, bare_s = [], []
    for r in range(1, ROUNDS + 1):  # interleaved, so machine load hits both alike
        t = time.perf_counter()
        trainer.update(r)
        harness.append(time.perf_counter() - t)
        t = time.perf_counter()
        _bare_loop(*bare)
        bare_s.append(time.perf_counter() - t)
    ratio = min(harness) / min(bare_s)
    benchmark.extra_info.update(update_s=min(harness), bare_s=min(bare_s), ratio=ratio, batch=B, steps=cfg.steps,
                                trained_steps=K, precision=trainer.precision)
    benchmark.pedantic(trainer.update, args=(ROUNDS + 1,), rounds=1, iterations=1)
    print(f"\n[{preset}] B={B} T={cfg.steps} K={K}: update {min(harness):.3f}s, "
          f"bare {min(bare_s):.3f}s, ratio {ratio:.3f}")
    assert ratio <= 1.15
