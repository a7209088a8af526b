"""Run by tests/train/test_real_train.py under ``accelerate launch --num_processes 2 --cpu``: two GRPO
updates of tiny-wan with LoRA on every rank, plus the data-parallel helpers of
grpo_bench/train/distributed.py on rank-dependent data; each rank writes what it saw to OUT/rank<r>.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from grpo_bench.api import Reward


class ToyReward(Reward):
    dimensions = ("vq", "mq", "ta")

    def __call__(self, videos, prompts):
        v = videos.float()
        return {"vq": -v.abs().mean((1, 2, 3, 4)), "mq": -(v[:, :, 1:] - v[:, :, :-1]).abs().mean((1, 2, 3, 4)),
                "ta": v[:, 0].mean((1, 2, 3))}


def main(out: Path) -> None:
    from accelerate import Accelerator, PartialState
    from section_support import model_of

    from grpo_bench.config import expected_compute
    from grpo_bench.config.run import RunConfig, resolve
    from grpo_bench.config.sections import section
    from grpo_bench.train import distributed
    from grpo_bench.train.trainer import train

    state = PartialState(cpu=True)
    rank, world = state.process_index, state.num_processes
    cfg = RunConfig(model="tiny-wan", method="flow_grpo", updates=2, steps=3, prompts_per_update=2, group_size=2,
                    frames=5, height=16, width=16, lora_rank=2, device="cpu", eval_samples=1, eval_every=100,
                    diag_every=0, checkpoint_every=100, save_videos=False, lr=1e-3)
    # the helpers on rank-dependent data (before train(): its end_training() closes the process group)
    acc = Accelerator(cpu=True)
    rows = distributed.shard(8, rank, world)
    local = torch.arange(8.0)[rows] * 10
    gathered = distributed.gather_rewards(local, acc)
    probe = torch.nn.Parameter(torch.zeros(3))
    probe.grad = torch.full((3,), float(rank + 1))
    distributed.average_gradients([probe], acc)
    model = model_of(cfg)
    final = train(cfg, out / f"run{rank}", model=model, reward=ToyReward())
    params = [p for p in model.trainable_module().parameters() if p.requires_grad]

    record = {
        "rank": rank,
        "world": world,
        "digest": distributed.parameter_digest(params),
        "lora_b_abs": float(
            sum(q.detach().abs().sum() for n, q in model.trainable_module().named_parameters() if "lora_B" in n)
        ),
        "updates": final.get("updates"),
        "rows": [rows.start, rows.stop],
        "gathered": gathered.tolist(),
        "grad": probe.grad.tolist(),
        "rank_seed": distributed.rank_seed(cfg.seed, rank),
        "compute": {k: v for k, v in final["compute"].items() if k != "compute_seconds"},
        "compute_expected": expected_compute.expected(  # the closed form (one process)
            section(resolve(cfg), expected_compute.ComputeShape), cfg.updates),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
