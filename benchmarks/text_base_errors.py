"""What the text task's base model gets wrong, by word length: the exact reader's readings of base-model samples.

    python benchmarks/text_base_errors.py [--per-word 4] [--steps 10] [--seed 0] [--ocr]

For every training word, ``--per-word`` samples (ODE, ``--steps`` steps, shift 3, guidance 1, one thread), read by
the exact reader (text_checker.py ``read``). Per word length: samples, exact readings, readings of the word's
length, and inside those the unreadable cells ('?': no glyph above the cosine threshold, i.e. blur or smudge)
against wrong letters, and readings with extra cells. Training words only: nothing here reads the held-out ones.
``--ocr`` also reads every sample with PP-OCRv4 (the training reward's recogniser) and prints how its scores (word
score, exact reading, the recogniser's own confidence, the chance of the exact reading: image_world_ocr_prob)
rank the samples against the exact reader (Spearman).
"""

from __future__ import annotations

import argparse
import collections

import torch

from grpo_bench import models
from grpo_bench.core.sampling import sample
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import make_kernel
from grpo_bench.image_world.text_checker import check, ink_of, read
from grpo_bench.image_world.text_reward import letters_only
from grpo_bench.image_world.words import prompts, word_of


def base_samples(per_word: int, steps: int, seed: int, batch: int = 64):
    """Yield (prompts, images Tensor[B, 3, 1, 32, 128]) of the shipped base, ``per_word`` samples of each training
    word."""
    model = models.load("image_world_text", frames=1)
    texts = [p for p in prompts("train") for _ in range(per_word)]
    g = torch.Generator().manual_seed(seed)
    for i in range(0, len(texts), batch):
        chunk = texts[i:i + batch]
        noise = torch.randn(len(chunk), *model.latent_shape, generator=g)
        with torch.no_grad():
            yield chunk, model.decode(sample(model, chunk, noise, sigmas(steps, 3.0), make_kernel("ode"),
                                             guidance=1.0, generator=g))


def count_readings(chunk: list[str], readings: list[str],
                   counts: dict[int, collections.Counter] | None = None) -> dict[int, collections.Counter]:
    """Add each (prompt, reading) to {word length: Counter(samples, exact, right_length, unreadable, wrong_letter,
    too_long)}: unreadable and wrong letters are counted only in readings of the word's length."""
    counts = counts if counts is not None else collections.defaultdict(collections.Counter)
    for prompt, reading in zip(chunk, readings):
        word = word_of(prompt)
        c = counts[len(word)]
        for key in ("samples", "exact", "right_length", "unreadable", "wrong_letter", "too_long"):
            c[key] += 0
        c["samples"] += 1
        c["exact"] += reading == word
        if len(reading) == len(word):
            c["right_length"] += 1
            c["unreadable"] += reading.count("?")
            c["wrong_letter"] += sum(a != b and a != "?" for a, b in zip(reading, word))
        c["too_long"] += len(reading) > len(word)
    return counts


def error_counts(per_word: int, steps: int, seed: int) -> dict[int, collections.Counter]:
    """``count_readings`` over the exact reader's readings of ``base_samples``."""
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for chunk, images in base_samples(per_word, steps, seed):
        count_readings(chunk, read(images)[0], counts)
    return counts


def ocr_agreement(per_word: int, steps: int, seed: int) -> dict[str, dict[str, float]]:
    """{OCR score: {exact-reader column: Spearman over the samples}}, and each score's mean under "mean"."""
    from scipy.stats import spearmanr

    from grpo_bench.image_world.text_reward import ocr_probability
    from grpo_bench.rewards import rapid_ocr

    ocr, rows = rapid_ocr.engine(1), []
    for chunk, images in base_samples(per_word, steps, seed):
        reader = check(images, chunk)
        probability = ocr_probability(images, chunk)
        grey = ((1.0 - 2.0 * ink_of(images) + 1.0) * 127.5).round().to(torch.uint8).numpy()
        for j, prompt in enumerate(chunk):
            (text, confidence), = ocr(rapid_ocr.bgr(grey[j].copy(), j), use_det=False, use_cls=False,
                                      use_rec=True)[0]
            word, text = word_of(prompt), letters_only(str(text))
            rows.append({"word score": rapid_ocr.word_score(text, word), "exact": float(text == word),
                         "confidence": float(confidence), "probability": float(probability[j]),
                         "correct": float(reader["correct"][j]),
                         "ta": float(reader["ta"][j]), "mq": float(reader["mq"][j])})
    out = {}
    for score in ("word score", "exact", "confidence", "probability"):
        values = [r[score] for r in rows]
        out[score] = {"mean": sum(values) / len(values),
                      **{col: float(spearmanr(values, [r[col] for r in rows]).statistic)
                         for col in ("correct", "ta", "mq")}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-word", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ocr", action="store_true", help="also rank the samples by PP-OCRv4's scores")
    args = parser.parse_args()
    torch.set_num_threads(1)
    counts = error_counts(args.per_word, args.steps, args.seed)
    columns = ("samples", "exact", "right_length", "unreadable", "wrong_letter", "too_long")
    print("length " + " ".join(f"{c:>12}" for c in columns))
    for length in sorted(counts):
        print(f"{length:>6} " + " ".join(f"{counts[length][c]:>12}" for c in columns))
    if args.ocr:
        print("PP-OCRv4 score: mean, Spearman with the exact reader's correct / ta / mq")
        for score, row in ocr_agreement(args.per_word, args.steps, args.seed).items():
            print(f"  {score:>10}: {row['mean']:.3f}  {row['correct']:+.3f} / {row['ta']:+.3f} / {row['mq']:+.3f}")


if __name__ == "__main__":
    main()
