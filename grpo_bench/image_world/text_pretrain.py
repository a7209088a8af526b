"""Pretrain the text task's base model (``python -m grpo_bench.image_world.text_pretrain --minutes 11.5``), with the
compositional model's recipe (pretrain.py ``fit``: rectified flow, AdamW, EMA, bf16 where the CPU has it, one
thread) on rendered training words only (the held-out words never). The card records data, steps, wall time and
the held-out and training scores of 20-step ODE samples under the exact reader (text_checker.py) and under the
training OCR (PP-OCRv4, when rapidocr-onnxruntime is installed).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from grpo_bench.image_world.pretrain import command_line, fit, flow_batch, write_card
from grpo_bench.image_world.text_checker import check
from grpo_bench.image_world.text_model import DEFAULT_WEIGHTS, TextWorldModel, save_text_weights
from grpo_bench.image_world.text_net import NULL, TextUNet, TextUNetConfig
from grpo_bench.image_world.text_render import render_words
from grpo_bench.image_world.words import TRAIN_WORDS, letters, prompts, word_of

CONFIG = TextUNetConfig()
BATCH = 32


def _batch(g: torch.Generator) -> tuple:
    """(x0, cond, sigma, z) of one step, every draw from ``g``."""
    words = [TRAIN_WORDS[int(i)] for i in torch.randint(len(TRAIN_WORDS), (BATCH,), generator=g)]
    x0 = render_words(words, seed=int(torch.randint(2**62, (1,), generator=g)))[:, :, 0]
    return flow_batch(x0, torch.tensor([letters(w) for w in words], dtype=torch.long), NULL, g)


def train(out: Path, minutes: float | None, steps: int | None, seed: int = 0) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    ema, step, wall, running, bf16 = fit(TextUNet(CONFIG), lambda: _batch(g), minutes, steps)
    save_text_weights(ema, out, extra={"steps": step, "seed": seed})
    return {
        "model": "image world text base model (2D-conv U-Net, rectified flow, 32x128 grey stills of one word)",
        "weights": out.name,
        "command": f"python -m grpo_bench.image_world.text_pretrain --steps {step} --seed {seed} --out {out.name}",
        "data": f"rendered training words ({len(TRAIN_WORDS)} words of 3-6 letters, uniform, jittered); the "
                "held-out words never",
        "seed": seed, "steps": step, "batch": BATCH, "bf16": bf16, "threads": torch.get_num_threads(),
        "wall_time_s": round(wall, 1), "final_loss_ema": round(running, 5) if running is not None else None,
        "torch": torch.__version__, "params": sum(p.numel() for p in ema.parameters()),
        "architecture": CONFIG.to_dict(), "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }


def scores(model: TextWorldModel, split: str, per_prompt: int, steps: int = 20, shift: float = 3.0,
           seed: int = 1234, ocr: bool = True) -> dict:
    """Mean exact-reader scores (and the training OCR's word score and exact rate) of 20-step ODE samples."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel

    texts = [p for p in prompts(split) for _ in range(per_prompt)]
    noise = torch.randn(len(texts), *model.latent_shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        images = sample(model, texts, noise, sigmas(steps, shift), make_kernel("ode"), decode=True)
    exact = check(images, texts)
    out = {"split": split, "images": len(texts), "steps": steps, "shift": shift}
    out.update({k: round(float(v.mean()), 4) for k, v in exact.items()})
    by_length: dict[str, float] = {}
    for n in sorted({len(word_of(t)) for t in texts}):
        rows = [i for i, t in enumerate(texts) if len(word_of(t)) == n]
        by_length[str(n)] = round(float(exact["correct"][rows].mean()), 4)
    out["correct_by_length"] = by_length
    if ocr:
        from grpo_bench.image_world.text_reward import ocr_scores

        read = ocr_scores(images, texts)
        out["ocr_word_score"] = round(float(read["ocr"].mean()), 4)
        out["ocr_exact"] = round(float(read["ocr_exact"].mean()), 4)
    return out


def main(argv: list[str] | None = None) -> None:
    args = command_line(__doc__.splitlines()[0], DEFAULT_WEIGHTS, argv, per_prompt=16)
    card = train(args.out, args.minutes, args.steps, args.seed)
    from grpo_bench.image_world.text_model import text_world_model

    model = text_world_model(path=args.out)
    card["held_out"] = scores(model, "eval", args.per_prompt)
    card["train_sample"] = scores(model, "train", 1)
    write_card(args.out, card)
    print(json.dumps({k: card[k] for k in ("held_out", "train_sample")}, indent=2))


if __name__ == "__main__":
    main()
