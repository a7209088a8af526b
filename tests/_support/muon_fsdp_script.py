"""Run by tests/train/test_optimizers.py under ``accelerate launch`` (2 CPU processes, gloo): one GRPO update of
tiny-wan, full fine-tuning with ``optimizer: muon``, data parallel (``dp``) or FSDP2-sharded (``fsdp``).
Rank 0 writes the initial and final trainable parameters to OUT/<mode>.pt (in module order)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dist_train_script import ToyReward  # noqa: E402


def main(out: Path, mode: str) -> None:
    from section_support import model_of

    from grpo_bench.config.run import RunConfig, resolve
    from grpo_bench.train import export
    from grpo_bench.train.trainer import Trainer

    cfg = resolve(RunConfig(model="tiny-wan", method="flow_grpo", kl="fixed", kl_weight=0.5, updates=1,
                            minibatches=1, steps=3, prompts_per_update=2, group_size=2, frames=5, height=16,
                            width=16, lora_rank=0, device="cpu", eval_samples=1, eval_every=100, diag_every=0,
                            checkpoint_every=100, save_videos=False, lr=1e-3, optimizer="muon", weight_decay=0.01))
    model = model_of(cfg)
    start = [p.detach().clone() for p in model.trainable_module().parameters() if p.requires_grad]
    trainer = Trainer(cfg, out / f"{mode}-run", model=model, reward=ToyReward())
    trainer.update(0)
    if trainer.sharded:
        final = list(export.gather_trainable(trainer.module).values())
    else:
        final = [p.detach() for p in trainer.module.parameters() if p.requires_grad]
    if int(os.environ["RANK"]) == 0:
        torch.save({"start": start, "final": [t.clone() for t in final], "sharded": trainer.sharded},
                   out / f"{mode}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
