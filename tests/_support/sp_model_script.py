"""Run by tests/models/test_sequence_parallel.py under ``torch.distributed.run --nproc_per_node 2`` (CPU, gloo):
one forward and backward of a tiny random transformer (tiny-wan / tiny-hunyuan15, LoRA off, full
fine-tuning) split over the two processes by sequence parallelism, next to the same computation unsplit on
every rank. Rank 0 writes OUT/<model>.json: the largest relative difference of the velocity and of the
gradients (the group's summed partial gradients against the unsplit model's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main(name: str, out: Path) -> None:
    import torch.distributed as dist

    from grpo_bench.models.adapter_options import AdapterOptions
    from grpo_bench.models.hunyuan15 import tiny_hunyuan15
    from grpo_bench.models.wan import tiny_wan

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    build = {"tiny-wan": tiny_wan, "tiny-hunyuan15": tiny_hunyuan15}[name]
    size = 32 if name == "tiny-wan" else 16  # tiny-wan: 3 x 2 x 2 = 12 video tokens (16: 3)
    plain, split = (build(AdapterOptions(frames=9, height=size, width=size, lora_rank=0, device="cpu")) for _ in "ab")
    if name == "tiny-hunyuan15":  # 15 + 8 + 4 = 27 text rows: one masked row pads them to a multiple of 2
        for model in (plain, split):
            model.pipe.tokenizer_max_length = 15
    split.enable_sequence_parallel(2, torch.device("cpu"))
    prompts = ["a red ball", "the quick fox"]
    cond = plain.encode_prompts(prompts)
    x = torch.randn(2, *plain.latent_shape, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.7, 0.3])
    w = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))  # a random linear loss on v
    results = {}
    grads = {}
    for tag, model in (("plain", plain), ("split", split)):
        v = model.velocity(x, sigma, cond)
        (v * w).sum().backward()
        g = {n: p.grad.detach().clone() for n, p in model.trainable_module().named_parameters()
             if p.requires_grad and p.grad is not None}
        if tag == "split":
            for t in g.values():
                dist.all_reduce(t)  # the group's partial gradients summed
        results[tag], grads[tag] = v.detach(), g
    missing = sorted(set(grads["plain"]) - set(grads["split"]))
    keys = [k for k in grads["plain"] if k in grads["split"]]
    flat = {t: torch.cat([grads[t][k].flatten() for k in keys]) for t in grads}
    # per tensor, relative to its own norm or, for a gradient near zero (a key bias: softmax ignores it),
    # to a thousandth of the whole gradient's
    floor = 1e-3 * float(flat["plain"].norm())
    per = {k: float((grads["split"][k] - grads["plain"][k]).norm()) / max(float(grads["plain"][k].norm()), floor)
           for k in keys}
    worst = max(per, key=per.get)
    record = {"velocity": _rel(results["split"], results["plain"]), "grad": _rel(flat["split"], flat["plain"]),
              "grad_tensor": per[worst], "worst": worst,
              "missing": missing, "n_grads": len(grads["plain"]), "text_padding": getattr(split.net, "text_padding", 0),
              "shape": list(results["split"].shape)}
    if dist.get_rank() == 0:
        (out / f"{name}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
