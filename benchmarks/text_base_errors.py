"""What the text task's base model gets wrong, by word length: the exact reader's readings of base-model samples.

    python benchmarks/text_base_errors.py [--per-word 4] [--steps 10] [--seed 0]

For every training word, ``--per-word`` samples (ODE, ``--steps`` steps, shift 3, guidance 1, one thread), read by
the exact reader (text_checker.py ``read``). Per word length: samples, exact readings, readings of the word's
length, and inside those the unreadable cells ('?': no glyph above the cosine threshold, i.e. blur or smudge)
against wrong letters, and readings with extra cells. Training words only: nothing here reads the held-out ones.
"""

from __future__ import annotations

import argparse
import collections

import torch

from grpo_bench import models
from grpo_bench.core.sampling import sample
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import make_kernel
from grpo_bench.image_world.text_checker import read
from grpo_bench.image_world.words import prompts, word_of


def error_counts(per_word: int, steps: int, seed: int, batch: int = 64) -> dict[int, collections.Counter]:
    """{word length: Counter(samples, exact, right_length, unreadable, wrong_letter, too_long)}."""
    model = models.load("image_world_text", frames=1)
    texts = [p for p in prompts("train") for _ in range(per_word)]
    g = torch.Generator().manual_seed(seed)
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for i in range(0, len(texts), batch):
        chunk = texts[i:i + batch]
        noise = torch.randn(len(chunk), *model.latent_shape, generator=g)
        with torch.no_grad():
            images = model.decode(sample(model, chunk, noise, sigmas(steps, 3.0), make_kernel("ode"), guidance=1.0,
                                         generator=g))
        for prompt, reading in zip(chunk, read(images)[0]):
            word = word_of(prompt)
            c = counts[len(word)]
            c["samples"] += 1
            c["exact"] += reading == word
            if len(reading) == len(word):
                c["right_length"] += 1
                c["unreadable"] += reading.count("?")
                c["wrong_letter"] += sum(a != b and a != "?" for a, b in zip(reading, word))
            c["too_long"] += len(reading) > len(word)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-word", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    counts = error_counts(args.per_word, args.steps, args.seed)
    columns = ("samples", "exact", "right_length", "unreadable", "wrong_letter", "too_long")
    print("length " + " ".join(f"{c:>12}" for c in columns))
    for length in sorted(counts):
        print(f"{length:>6} " + " ".join(f"{counts[length][c]:>12}" for c in columns))


if __name__ == "__main__":
    main()
