"""The plan's reference config: HunyuanVideo 1.5 480p x 81 frames, the SAGE-GRPO paper's recipe (no weights: the
plan reads configs on the meta device); shared by the plan tests and the sequence-parallel plan test."""

from __future__ import annotations

from grpo_bench.config.run import RunConfig


def hy(**kw) -> RunConfig:
    base = dict(model="hunyuan15-480p", reward="videoalign", eval_oracle=False, frames=81, height=480, width=848,
                steps=20, shift=5.0, lora_rank=64, gradient_checkpointing=True, mixed_precision="bf16",
                prompts_per_update=8, group_size=4, micro_batch=2, method="sage_grpo")
    base.update(kw)
    return RunConfig(**base)
