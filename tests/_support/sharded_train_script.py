"""Run by tests/train/test_sharded_training.py under ``accelerate launch`` (2 CPU processes, gloo) with the plain
data-parallel config (``dp``), an FSDP2 config (``fsdp``) or the DeepSpeed ZeRO-2 config (``zero2``): two
GRPO updates of tiny-wan with LoRA and the fixed KL anchor; the fsdp and zero2 runs are interrupted after
update 1 and resumed from their checkpoint.
Each rank writes what it saw to OUT/<mode>-rank<r>.json; rank 0 also the full final trainable
parameters to OUT/<mode>-params.pt."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dist_train_script import ToyReward  # noqa: E402


class Interrupt(Exception):
    """Raised from the progress callback: a run killed after its checkpoint of update 1."""


def main(out: Path, mode: str) -> None:
    from section_support import model_of
    from torch.distributed.tensor import DTensor

    from grpo_bench.config.run import RunConfig, resolve
    from grpo_bench.train import distributed, sharding
    from grpo_bench.train.trainer import Trainer

    rank = int(os.environ["RANK"])  # set by the launcher (the Trainer builds the accelerate state)
    cfg = resolve(RunConfig(model="tiny-wan", method="flow_grpo", kl="fixed", kl_weight=0.5, updates=2,
                            minibatches=1, steps=3,
                            prompts_per_update=2, group_size=2, frames=5, height=16, width=16, lora_rank=2,
                            device="cpu", eval_samples=1, eval_every=100, diag_every=1, checkpoint_every=1,
                            save_videos=False, lr=1e-3))
    run_dir = out / f"{mode}-run"
    record: dict = {"rank": rank, "mode": mode}
    if mode in ("fsdp", "zero2"):
        def stop(u: int, total: int, line: dict) -> None:
            if u == 1:
                raise Interrupt

        first = Trainer(cfg, run_dir, model=model_of(cfg), reward=ToyReward())
        try:
            first.run(resume=False, progress=stop)
        except Interrupt:
            record["interrupted_after"] = [p.name for p in sorted((run_dir / "checkpoints").iterdir())]
    # fresh random tiny-wan (seeded): the same initial weights
    model = model_of(cfg)
    trainer = Trainer(cfg, run_dir, model=model, reward=ToyReward())
    params = dict((n, p) for n, p in trainer.model.trainable_module().named_parameters() if p.requires_grad)
    record["sharded"] = trainer.sharded
    record["all_dtensor"] = all(isinstance(p, DTensor) for p in params.values())
    record["local_numel"] = sum(sharding.local(p).numel() for p in params.values())
    record["full_numel"] = sum(p.numel() for p in params.values())
    if mode == "zero2":  # ZeRO-2: each rank's fp32 master partition and its Adam moments
        zero = trainer.stepper.engine.optimizer
        record["zero_stage"] = trainer.stepper.engine.zero_optimization_stage()
        record["partition_numel"] = sum(t.numel() for t in zero.single_partition_of_fp32_groups)
        record["param_dtypes"] = sorted({str(p.dtype) for p in trainer.model.trainable_module().parameters()})

    def check(u: int, total: int, line: dict) -> None:
        """After the last update, before run() ends the process group (collectives still work)."""
        if u < total:
            return
        # The fixed anchor (initial LoRA snapshot, lora_B = 0) is the base model; evaluating it swaps
        # the shards in and back: the policy's velocity is unchanged afterwards.
        base = model_of(cfg)
        x = torch.randn(2, *base.latent_shape, generator=torch.Generator().manual_seed(0))
        s = torch.tensor([0.8, 0.3])
        cond = base.encode_prompts(["a red circle", "a cat"])
        with torch.no_grad():
            v_base = base.velocity(x, s, cond)
            v_policy = model.velocity(x, s, cond)
            v_anchor = trainer.anchors.velocity("initial")(x, s, cond)
            v_policy_after = model.velocity(x, s, cond)
        record["anchor_vs_base"] = float((v_anchor - v_base).abs().max())
        record["policy_vs_base"] = float((v_policy - v_base).abs().max())
        record["policy_restored"] = float((v_policy_after - v_policy).abs().max())
        record["digest"] = distributed.parameter_digest(params.values())
        record["full"] = {n: sharding.full(p.detach()).clone() for n, p in params.items()}

    final = trainer.run(resume=True, progress=check)
    if mode == "zero2":
        zero = trainer.stepper.engine.optimizer
        record["adam_state_numel"] = sum(v["exp_avg"].numel() for v in zero.optimizer.state.values())
    record["updates"], record["optimizer_steps"] = final["updates"], final["optimizer_steps"]
    full = record.pop("full")
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()] if rank == 0 else []
    record["grad_norm"] = [line["grad_norm"] for line in lines]
    record["kl"] = [line["kl"] for line in lines]
    record["diag"] = [line.get("grad_norm_per_step") for line in lines]
    if rank == 0:
        torch.save(full, out / f"{mode}-params.pt")
        # the exported LoRA adapters (peft's names: no adapter name, relative to the transformer) are the trained ones
        from safetensors.torch import load_file

        exported = load_file(str(run_dir / "policy" / "adapter_model.safetensors"))
        named = {n.removeprefix("transformer.").replace(".default", ""): t for n, t in full.items()}
        record["policy_keys_match"] = set(exported) == set(named)
        record["policy_max_diff"] = max(float((exported[k] - named[k].float()).abs().max()) for k in exported)
    (out / f"{mode}-rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
