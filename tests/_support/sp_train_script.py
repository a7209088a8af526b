"""Run by tests/models/test_sequence_parallel.py: two GRPO updates of tiny-wan (LoRA) with ``sequence_parallel: SP``,
under ``accelerate launch --num_processes N --cpu`` (gloo) or as one plain process. Rank 0 writes
OUT/<tag>.json (metrics, compute totals, rows) and OUT/<tag>-params.pt (the final trainable parameters);
every rank writes OUT/<tag>-rank<r>.json with its parameter digest."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dist_train_script import ToyReward  # noqa: E402


def main(out: Path, tag: str, sp: int) -> None:
    from section_support import model_of

    from grpo_bench.config.run import RunConfig, resolve
    from grpo_bench.train import distributed, sharding
    from grpo_bench.train.trainer import Trainer

    rank = int(os.environ.get("RANK", "0"))
    # 5 frames at 32 x 32: latents 16 x 2 x 4 x 4, 2 x 2 x 2 = 8 video tokens (patch 1 x 2 x 2)
    cfg = resolve(RunConfig(model="tiny-wan", method="flow_grpo", kl="fixed", kl_weight=0.5, updates=2,
                            minibatches=1, steps=3, prompts_per_update=2, group_size=2, frames=5, height=32,
                            width=32, lora_rank=2, device="cpu", eval_samples=1, eval_every=1, diag_every=1,
                            checkpoint_every=100, save_videos=False, lr=1e-3, sequence_parallel=sp))
    model = model_of(cfg)
    trainer = Trainer(cfg, out / f"{tag}-run", model=model, reward=ToyReward())
    seen: dict = {}

    def last(u: int, total: int, line: dict) -> None:  # while the process group lives (FSDP2: gathered)
        if u == total:
            named = [(n, p) for n, p in trainer.model.trainable_module().named_parameters() if p.requires_grad]
            seen["params"] = {n: sharding.full(p.detach()).clone() for n, p in named}
            seen["digest"] = distributed.parameter_digest([p for _, p in named])

    final = trainer.run(resume=False, progress=last)
    params = seen["params"]
    (out / f"{tag}-rank{rank}.json").write_text(json.dumps({
        "digest": seen["digest"], "sharded": trainer.sharded,
        "rows": [trainer.shard.rows.start, trainer.shard.rows.stop],
        "split": getattr(trainer.model, "sequence_parallel", 1),
    }))
    if rank == 0:
        lines = [json.loads(x) for x in (out / f"{tag}-run" / "metrics.jsonl").read_text().splitlines()]
        (out / f"{tag}.json").write_text(json.dumps({"lines": lines, "compute": final["compute"],
                                                     "eval": final["eval"]}))
        torch.save(params, out / f"{tag}-params.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
