"""Measures one training forward+backward of a small DiT block stack on the CPU and prints it next to
the plan's prediction (run in a fresh process by tests/plan/test_plan.py; argv: wan|hunyuan, checkpointing 0|1)."""

from __future__ import annotations

import gc
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
warnings.filterwarnings("ignore")


def main(family: str, ckpt: bool) -> None:
    from gpu_check import Peak

    from grpo_bench.plan.costs import training_activation_bytes
    from grpo_bench.plan.spec import transformer_spec

    torch.manual_seed(0)
    if family == "wan":
        from diffusers import WanTransformer3DModel

        tr = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=96, in_channels=16,
                                   out_channels=16, text_dim=64, freq_dim=256, ffn_dim=1536, num_layers=2,
                                   cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=1024)
        latent, text = (16, 7, 32, 32), 16
        inputs = {"hidden_states": torch.randn(1, *latent), "timestep": torch.tensor([500.0]),
                  "encoder_hidden_states": torch.randn(1, text, 64)}
        spec = transformer_spec(tr, latent, text, joint_text=False)
    else:
        from diffusers import HunyuanVideo15Transformer3DModel

        tr = HunyuanVideo15Transformer3DModel(in_channels=9, out_channels=4, num_attention_heads=4,
                                              attention_head_dim=128, num_layers=3, num_refiner_layers=1,
                                              mlp_ratio=4.0, patch_size=1, patch_size_t=1,
                                              text_embed_dim=64, text_embed_2_dim=32, image_embed_dim=32,
                                              rope_axes_dim=(16, 56, 56), target_size=640, task_type="t2v")
        latent = (4, 5, 16, 16)
        inputs = {"hidden_states": torch.randn(1, 9, *latent[1:]), "image_embeds": torch.zeros(1, 4, 32),
                  "timestep": torch.tensor([500.0]), "encoder_hidden_states": torch.randn(1, 24, 64),
                  "encoder_attention_mask": torch.ones(1, 24), "encoder_hidden_states_2": torch.randn(1, 8, 32),
                  "encoder_attention_mask_2": torch.ones(1, 8)}
        spec = transformer_spec(tr, latent, 24 + 8 + 4, joint_text=True)
    if ckpt:
        tr.enable_gradient_checkpointing()
    tr.train()
    gc.collect()
    with Peak(torch.device("cpu")) as peak:
        out = tr(**inputs, return_dict=False)[0]
        out.square().mean().backward()
    predicted = training_activation_bytes(spec, 1, ckpt, bf16=False) + spec.transformer_params * 4  # + fp32 grads
    print(json.dumps({"tokens": spec.tokens, "params": spec.transformer_params, "measured": peak.bytes,
                      "predicted": predicted}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1")
