"""The image world's base models scored as suites/field_image.yaml evaluates them, written into their cards.

A card's own scores are of 20-step ODE samples in float32 (the pretraining scripts' ``accuracy`` / ``scores``); a
field_image cell evaluates with its suite's sampling steps (10), under bf16 autocast where the CPU has bf16 units
(as every run of these models: train/precision.py). This script scores the shipped weights that way, on the same
splits and noise seed as the card (the held-out prompts at the card's samples per prompt, one sample of every
training prompt) and stores the result as the card's ``protocol`` section (atomically; the weights, their digest
and every other key untouched), so the base model's accuracy a reader of the field's report compares against is
the protocol's:

    python benchmarks/image_world_protocol_scores.py            # both cards
    python benchmarks/image_world_protocol_scores.py --check    # print, write nothing
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch

from grpo_bench.atomic import atomic_write_text
from grpo_bench.suite.parse import load_suite

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "field_image.yaml"


def protocol_steps() -> tuple[int, float]:
    """(sampling steps, shift) of field_image's cells: every cell shares them (checked)."""
    from grpo_bench.suite.expand import expand

    found = {(c.config.steps, c.config.shift) for c in expand(load_suite(SUITE))}
    if len(found) != 1:
        raise SystemExit(f"error: {SUITE.name} samples with several (steps, shift): {sorted(found)}")
    return found.pop()


def bf16_here() -> bool:
    from grpo_bench.train.precision import has_bf16_units

    return has_bf16_units(cpu=True)


def protocol_section(score: Callable[..., dict], model: object, per_prompt: int, steps: int, shift: float,
                     bf16: bool) -> dict:
    """The card's ``protocol`` section: ``score(model, split, per_prompt, steps=, shift=)`` of both splits."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        held_out = score(model, "eval", per_prompt, steps=steps, shift=shift)
        train_sample = score(model, "train", 1, steps=steps, shift=shift)
    return {"suite": SUITE.name, "steps": steps, "shift": shift, "kernel": "ode", "guidance": 1.0,
            "precision": "bf16 autocast" if bf16 else "float32", "threads": torch.get_num_threads(),
            "command": "python benchmarks/image_world_protocol_scores.py",
            "held_out": held_out, "train_sample": train_sample}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print the sections, write no card")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from grpo_bench.image_world import grammar, pretrain, text_pretrain, words
    from grpo_bench.image_world.model import DEFAULT_WEIGHTS, image_world_model
    from grpo_bench.image_world.text_model import DEFAULT_WEIGHTS as TEXT_WEIGHTS
    from grpo_bench.image_world.text_model import text_world_model

    steps, shift = protocol_steps()
    bf16 = bf16_here()
    # (weights, scorer, model, the card's held-out images, the held-out prompts)
    cards = ((DEFAULT_WEIGHTS, pretrain.accuracy, image_world_model, lambda c: c["checker"]["held_out"]["images"],
              grammar.prompts("eval")),
             (TEXT_WEIGHTS, text_pretrain.scores, text_world_model, lambda c: c["held_out"]["images"],
              words.prompts("eval")))
    for weights, score, build, held_out_images, held_out in cards:
        path = weights.with_suffix(".json")
        card = json.loads(path.read_text())
        per_prompt = held_out_images(card) // len(held_out)  # the card's own samples per held-out prompt
        section = protocol_section(score, build(), per_prompt, steps, shift, bf16)
        print(path.name, json.dumps(section, indent=2), flush=True)
        if not args.check:
            atomic_write_text(path, json.dumps({**card, "protocol": section}, indent=2) + "\n")


if __name__ == "__main__":
    main()
