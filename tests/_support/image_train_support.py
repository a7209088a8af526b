"""One update of a tiny random image model (CPU, no download) with FlowGRPO's LoRA targets: shared by the image
trainer's tests and the LoRA export test."""

from __future__ import annotations

from grpo_bench.config.run import RunConfig

FLOW_GRPO_TARGETS = ["attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "attn.to_k",
                     "attn.to_out.0", "attn.to_q", "attn.to_v"]  # flow_grpo scripts/train_sd3.py


def run_config(model: str, method: str, **kw) -> RunConfig:
    base = dict(model=model, method=method, reward="jpeg_incompressibility", updates=1, steps=4, prompts_per_update=2,
                group_size=2, frames=1, height=16, width=16, lora_rank=2, lora_targets=FLOW_GRPO_TARGETS,
                device="cpu", eval_samples=1, eval_oracle=False, diag_every=0, lr=1e-3, kl_weight=1e-2)
    base.update(kw)
    return RunConfig(**base)
