"""The exact reader of the text task: the held-out evaluator, independent of any OCR model.

Why an exact reader and not a second OCR model: the world's font and layout are known, so a generated image can
be read the way a renderer would have drawn it, by template matching against the renderer's own glyphs
(text_render.py ``glyphs``), with no learned weights that an RL run could over-fit the way it can over-fit the
training OCR (PP-OCRv4). A policy that draws strokes PP-OCRv4 reads as the word but that are not the word's
letters scores high on the training reward and low here: that gap is the hacking the text task measures.

Reading (``read``): ink = (1 - grey) / 2; the letter-cell grid (phase 0..CELL-1 across the width, vertical shift
within SEARCH_Y) is the one whose cells' best matched-filter responses sum highest; each cell fully inside the
image is then blank (ink below BLANK of the lightest glyph's), a letter (the glyph of highest cosine similarity,
within one pixel of the cell, at least TAU) or unreadable ('?'). The word is the non-blank cells left to right.
Every word the renderer draws, at every jitter, is read back exactly with cosine 1 (tests).

Scores (``check``): ``ta`` 1 - normalised edit distance of the reading to the prompt's word (the OCR reward's
formula, rewards/rapid_ocr.py ``word_score``), ``correct`` the reading is the word, ``letters`` the share of the
word's letters read at their index, ``length`` the reading has the word's length, ``mq`` the mean cosine of the
read cells (glyph fidelity), ``vq`` the share of ink inside cells read as letters (1 - stray marks), ``manifold``
the RMS distance of the grey image to its paper/ink snap.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from grpo_bench.image_world.text_render import CELL, HEIGHT, WIDTH, glyphs, size_error
from grpo_bench.image_world.words import LETTERS, word_of
from grpo_bench.rewards.rapid_ocr import word_score

SEARCH_Y = 2
TAU = 0.85
"""Least cosine similarity for a cell to read as a letter. Distinct glyphs reach 0.94 (h, n), so the letter is
the argmax; TAU rejects smudges and a third of the two-glyph overlays (o over x: 0.83)."""
BLANK = 0.25
"""A cell with less ink than this share of the lightest glyph's is blank."""
COLUMNS = ("ta", "correct", "letters", "length", "vq", "mq", "manifold")


@functools.lru_cache(maxsize=1)
def _kernels() -> tuple[Tensor, Tensor]:
    """(unit-norm glyph kernels [(2 SEARCH_Y + 1) * 26, 1, HEIGHT, CELL] for every vertical shift, blank mass)."""
    table = torch.from_numpy(glyphs())
    shifted = torch.stack([torch.roll(table, dy, dims=1) for dy in range(-SEARCH_Y, SEARCH_Y + 1)])
    unit = shifted / shifted.flatten(2).norm(dim=2)[:, :, None, None]
    return unit.reshape(-1, 1, HEIGHT, CELL), BLANK * table.sum(dim=(1, 2)).min()


def ink_of(images: Tensor, what: str = "text checker") -> Tensor:
    """Ink coverage [B, HEIGHT, WIDTH] in [0, 1] of images Tensor[B, 1 or 3, 1, HEIGHT, WIDTH] in [-1, 1]."""
    if images.ndim != 5 or images.shape[1] not in (1, 3) or tuple(images.shape[2:]) != (1, HEIGHT, WIDTH):
        raise size_error(tuple(images.shape), what)
    grey = images.detach().float().cpu().mean(dim=1)[:, 0]
    return ((1.0 - grey) / 2.0).clamp(0.0, 1.0)


def read(images: Tensor) -> tuple[list[str], dict[str, Tensor]]:
    """(the word read in each image, per-image {"mq", "vq"}) of images Tensor[B, 1 or 3, 1, HEIGHT, WIDTH]."""
    ink = ink_of(images)
    kernels, blank = _kernels()
    b, shifts = ink.shape[0], 2 * SEARCH_Y + 1
    response = F.conv2d(ink[:, None], kernels)[:, :, 0].reshape(b, shifts, len(LETTERS), -1)  # [B, S, 26, X]
    energy = F.conv2d((ink * ink)[:, None], torch.ones(1, 1, HEIGHT, CELL))[:, 0, 0]  # [B, X]
    mass = F.conv2d(ink[:, None], torch.ones(1, 1, HEIGHT, CELL))[:, 0, 0]
    cosine = response / energy.sqrt().clamp(min=1e-6)[:, None, None]
    best = response.max(dim=2).values  # [B, S, X]
    positions = best.shape[-1]
    words, mq, vq = [], [], []
    for i in range(b):
        grid = [(best[i, s, phase::CELL].sum(), s, phase) for s in range(shifts) for phase in range(CELL)]
        _, s, phase = max(grid, key=lambda t: float(t[0]))
        text, fits, letter_ink = [], [], 0.0
        for x in range(phase, positions, CELL):
            if mass[i, x] < blank:
                continue
            near = cosine[i, s, :, max(0, x - 1):x + 2]  # [26, <=3]: one pixel of slack each way
            value, flat = near.reshape(-1).max(dim=0)
            fits.append(float(value))
            if float(value) >= TAU:
                text.append(LETTERS[int(flat) // near.shape[1]])
                letter_ink += float(mass[i, x])
            else:
                text.append("?")
        total = float(ink[i].sum())
        words.append("".join(text))
        mq.append(sum(fits) / len(fits) if fits else 0.0)
        vq.append(min(1.0, letter_ink / total) if total > float(blank) else 1.0)
    return words, {"mq": torch.tensor(mq), "vq": torch.tensor(vq)}


def check(images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
    """Every column of COLUMNS, Tensor[B] each, for images and their text prompts (one line for a prompt outside
    the vocabulary or an image of the wrong size, before any image is read)."""
    targets = [word_of(p) for p in prompts]
    ink_of(images)
    if images.shape[0] != len(targets):
        raise ValueError(f"text checker: {images.shape[0]} images for {len(targets)} prompts")
    words, quality = read(images)
    grey = images.detach().float().cpu().mean(dim=1)[:, 0]
    snapped = torch.where(grey >= 0, 1.0, -1.0)
    return {
        "ta": torch.tensor([word_score(w, t) for w, t in zip(words, targets)]),
        "correct": torch.tensor([float(w == t) for w, t in zip(words, targets)]),
        "letters": torch.tensor([sum(a == c for a, c in zip(w, t)) / len(t) for w, t in zip(words, targets)]),
        "length": torch.tensor([float(len(w) == len(t)) for w, t in zip(words, targets)]),
        "vq": quality["vq"],
        "mq": quality["mq"],
        "manifold": (grey - snapped).pow(2).mean(dim=(1, 2)).sqrt(),
    }
