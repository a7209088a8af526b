"""The embedded world's vocabulary and prompts: 3 shapes × 4 colours × 4 motions = 48 prompts."""

from __future__ import annotations

import re

from grpo_bench.errors import UserError

SHAPES = ("circle", "square", "triangle")
COLORS = ("red", "green", "blue", "yellow")
MOTIONS = ("left", "right", "up", "down")

# RGB in [0, 1]; videos map them to [-1, 1]. Saturated and far apart so colour is unambiguous.
PALETTE = {
    "red": (0.92, 0.12, 0.10),
    "green": (0.10, 0.80, 0.18),
    "blue": (0.12, 0.28, 0.95),
    "yellow": (0.95, 0.88, 0.10),
}
BACKGROUND = (0.04, 0.04, 0.07)
# Unit direction (dx, dy) in image coordinates (y grows downwards).
DIRECTIONS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}

# Held out of pretraining and RL, used only for evaluation. Every colour, shape and motion still
# occurs in training, so these test composition, not new words.
EVAL_COMBOS = (
    ("red", "circle", "left"),
    ("green", "square", "right"),
    ("blue", "triangle", "up"),
    ("yellow", "circle", "down"),
    ("red", "triangle", "down"),
    ("green", "circle", "up"),
    ("blue", "square", "left"),
    ("yellow", "triangle", "right"),
)

_PROMPT = re.compile(r"^an? (\w+) (\w+) moving (\w+)$")


def prompt_text(color: str, shape: str, motion: str) -> str:
    return f"a {color} {shape} moving {motion}"


def parse(prompt: str) -> tuple[int, int, int]:
    """(colour, shape, motion) indices of a prompt; a clear error listing the vocabulary otherwise."""
    m = _PROMPT.match(prompt.strip().lower())
    vocab = f"colours {', '.join(COLORS)}; shapes {', '.join(SHAPES)}; motions {', '.join(MOTIONS)}"
    if not m:
        raise UserError(f"prompt {prompt!r} is not of the form 'a <colour> <shape> moving <motion>' ({vocab})")
    color, shape, motion = m.groups()
    for word, allowed in ((color, COLORS), (shape, SHAPES), (motion, MOTIONS)):
        if word not in allowed:
            raise UserError(f"prompt {prompt!r}: unknown word {word!r} ({vocab})")
    return COLORS.index(color), SHAPES.index(shape), MOTIONS.index(motion)


def prompts(split: str = "train") -> list[str]:
    """The world's prompts: split 'train' (40), 'eval' (8 held-out combinations) or 'all' (48)."""
    allowed = ("train", "eval", "all")
    if split not in allowed:
        raise UserError(f"unknown prompt split {split!r}; allowed: {', '.join(allowed)}")
    every = [(c, s, m) for c in COLORS for s in SHAPES for m in MOTIONS]
    held = set(EVAL_COMBOS)
    chosen = {"all": every, "eval": list(EVAL_COMBOS), "train": [t for t in every if t not in held]}[split]
    return [prompt_text(*t) for t in chosen]
