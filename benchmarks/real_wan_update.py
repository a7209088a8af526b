"""Device check: GRPO updates of a real-size Wan 2.1 1.3B configuration (random weights) in bf16 with
LoRA and gradient checkpointing; prints the time per update and the peak GPU memory as JSON.

    python benchmarks/real_wan_update.py                      # 1.3B, 33 frames at 480x832 (GPU)
    python benchmarks/real_wan_update.py --layers 1 --frames 5 --height 64 --width 64 --device cpu   # plumbing check

The transformer and VAE have the Wan 2.1 T2V 1.3B architecture (the VAE at its default size). The
UMT5-XXL text encoder is replaced by a one-layer UMT5 of the same width (4096): text encoding is
done once per prompt and cached, so it does not enter the per-update cost. The reward is a cheap
function of the decoded videos (the VAE decode is measured; a reward model is not).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from grpo_bench.api import Reward


class PixelReward(Reward):
    dimensions = ("vq", "mq", "ta")

    def __call__(self, videos, prompts):
        v = videos.float()
        return {"vq": -v.abs().mean((1, 2, 3, 4)), "mq": -(v[:, :, 1:] - v[:, :, :-1]).abs().mean((1, 2, 3, 4)),
                "ta": v[:, 0].mean((1, 2, 3))}


def build_pipe(layers: int):
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    from grpo_bench.models._tiny_text import word_tokenizer

    tok = word_tokenizer(["<pad>", "</s>"], pad="<pad>", eos="</s>", append_eos=True)
    text = UMT5EncoderModel(UMT5Config(vocab_size=len(tok), d_model=4096, d_kv=64, d_ff=256, num_layers=1, num_heads=64,
                                       pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
    transformer = WanTransformer3DModel(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, num_layers=layers)
    return WanPipeline(tokenizer=tok, text_encoder=text, vae=AutoencoderKLWan(), transformer=transformer,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--frames", type=int, default=33)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--method", default="sage_grpo")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--lora-rank", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    from grpo_bench.config.run import RunConfig
    from grpo_bench.models.adapter_options import AdapterOptions
    from grpo_bench.models.diffusers_video import count_params
    from grpo_bench.models.wan import WanModel
    from grpo_bench.train.trainer import train

    t0 = time.perf_counter()
    opts = AdapterOptions(frames=args.frames, height=args.height, width=args.width, lora_rank=args.lora_rank,
                          gradient_checkpointing=True, mixed_precision="bf16", device=args.device,
                          max_sequence_length=512)
    model = WanModel(build_pipe(args.layers), opts)
    build_s = time.perf_counter() - t0
    cfg = RunConfig(model="wan-random", method=args.method, updates=args.updates, steps=args.steps, shift=3.0,
                    prompts_per_update=1, group_size=args.group, micro_batch=args.micro_batch, frames=args.frames,
                    height=args.height, width=args.width, lora_rank=args.lora_rank, gradient_checkpointing=True,
                    mixed_precision="bf16", device=args.device, eval_every=10**6, eval_samples=1, diag_every=0,
                    checkpoint_every=10**6, save_videos=False)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        t1 = time.perf_counter()
        final = train(cfg, out, model=model, reward=PixelReward())
        total = time.perf_counter() - t1
    lines = final["metrics"]
    result = {
        "transformer_params": count_params(model.net.transformer), "trainable_params": count_params(model.net, True),
        "latent_shape": list(model.latent_shape), "rollouts_per_update": args.group, "steps": args.steps,
        "build_s": round(build_s, 1), "run_s_including_evals": round(total, 1),
        "last_update": {k: lines.get(k) for k in ("time_rollout", "time_reward", "time_train", "grad_norm", "reward")},
    }
    if args.device.startswith("cuda"):
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
