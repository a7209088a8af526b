"""Rendered words of the image world's text task: 32x128 grayscale stills in [-1, 1] (paper +1, ink -1).

The font is the one that ships with Pillow (``ImageFont.load_default(size=FONT_SIZE)``: Aileron Regular through
FreeType, Pillow >= 10.1), so nothing is downloaded. A word is laid out in fixed-width letter cells (CELL pixels,
each letter centred in its cell on one baseline), the row of cells centred in the image, then shifted as a whole
by an integer jitter (dx, dy) drawn per image. A scene is the sum of the per-letter glyph images (``glyphs``),
which the checker (text_checker.py) also reads with: letter-spaced like a sign, every glyph inside its cell.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.image_world.words import LETTERS, word_of

HEIGHT, WIDTH = 32, 128
FONT_SIZE = 18
CELL = 16
"""Letter cell width: the widest lowercase glyph at FONT_SIZE ('m', 'w') is 15 pixels."""
BASELINE = 22
"""Baseline row: ascenders reach row 8, descenders row 26 at FONT_SIZE."""
JITTER_X, JITTER_Y = 4, 1
"""Largest whole-word shift in pixels drawn by the renderer (the checker searches a little wider)."""


@functools.lru_cache(maxsize=1)
def glyphs() -> np.ndarray:
    """Ink coverage in [0, 1] of every lowercase letter, float32 [26, HEIGHT, CELL], centred in its cell on
    BASELINE. Raises UserError when Pillow has no FreeType (its default font is then a bitmap font)."""
    from PIL import Image, ImageDraw, ImageFont, features

    if not features.check("freetype2"):
        raise UserError("the image world's text task needs Pillow built with FreeType (its default font is "
                        "then Aileron); reinstall Pillow from its wheel: pip install --force-reinstall pillow")
    font = ImageFont.load_default(size=FONT_SIZE)
    out = np.zeros((len(LETTERS), HEIGHT, CELL), np.float32)
    for i, letter in enumerate(LETTERS):
        left, top, right, bottom = font.getbbox(letter, anchor="ms")
        if left < -CELL / 2 or right > CELL / 2 or BASELINE + top < JITTER_Y + 2 or BASELINE + bottom > HEIGHT - 3:
            raise RuntimeError(f"glyph {letter!r} does not fit its {CELL}-pixel cell at size {FONT_SIZE}")
        canvas = Image.new("L", (CELL, HEIGHT), 0)
        ImageDraw.Draw(canvas).text((CELL / 2, BASELINE), letter, fill=255, font=font, anchor="ms")
        out[i] = np.asarray(canvas, np.float32) / 255.0
    return out


def start_x(length: int) -> int:
    """Left edge of a ``length``-letter word's first cell before jitter (the row of cells centred)."""
    return (WIDTH - CELL * length) // 2


def ink(word: str, dx: int = 0, dy: int = 0) -> np.ndarray:
    """Ink coverage [HEIGHT, WIDTH] of ``word`` shifted by (dx, dy)."""
    table = glyphs()
    canvas = np.zeros((HEIGHT, WIDTH), np.float32)
    x0 = start_x(len(word)) + dx
    for i, letter in enumerate(word):
        x = x0 + CELL * i
        canvas[:, x:x + CELL] += table[LETTERS.index(letter)]
    return np.roll(canvas, dy, axis=0)  # the glyph rows are inside the image with room for dy (checked above)


def render_words(words: list[str], seed: int) -> Tensor:
    """Images Tensor[B, 1, 1, HEIGHT, WIDTH] in [-1, 1] of the words, each with its own jitter from ``seed``."""
    rng = np.random.default_rng(int(seed))
    shifts = rng.integers([-JITTER_X, -JITTER_Y], [JITTER_X + 1, JITTER_Y + 1], size=(len(words), 2))
    coverage = np.stack([ink(w, int(dx), int(dy)) for w, (dx, dy) in zip(words, shifts)]) if words else \
        np.zeros((0, HEIGHT, WIDTH), np.float32)
    return torch.from_numpy(1.0 - 2.0 * coverage)[:, None, None]


def render(prompts: list[str], seed: int) -> Tensor:
    """Images Tensor[B, 1, 1, HEIGHT, WIDTH] for text prompts (one line naming a prompt outside the vocabulary)."""
    return render_words([word_of(p) for p in prompts], seed)


def size_error(shape: tuple[int, ...], what: str) -> UserError:
    return UserError(f"{what}: expected images Tensor[B, 1 or 3, 1, {HEIGHT}, {WIDTH}] (the text task's "
                     f"{HEIGHT}x{WIDTH} stills), got shape {tuple(shape)}")
