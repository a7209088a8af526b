"""benchmarks/text_base_errors.py: the text base's misses by word length, counted from the exact reader's readings."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from grpo_bench.image_world.text_render import render
from grpo_bench.image_world.words import prompt_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import text_base_errors  # noqa: E402


def test_misses_are_counted_by_kind(monkeypatch):
    """Readings chosen by hand: exact, one blurred cell, one wrong letter, an extra cell, a short reading."""
    words = ["cat", "cat", "moon", "moon", "stone"]
    readings = ["cat", "c?t", "moan", "moonx", "ston"]
    chunk = [prompt_of(w) for w in words]
    monkeypatch.setattr(text_base_errors, "base_samples", lambda *a: iter([(chunk, torch.zeros(5, 3, 1, 32, 128))]))
    monkeypatch.setattr(text_base_errors, "read", lambda images: (readings, {}))
    counts = text_base_errors.error_counts(1, 2, 0)
    assert dict(counts[3]) == {"samples": 2, "exact": 1, "right_length": 2, "unreadable": 1, "wrong_letter": 0,
                               "too_long": 0}
    assert dict(counts[4]) == {"samples": 2, "exact": 0, "right_length": 1, "unreadable": 0, "wrong_letter": 1,
                               "too_long": 1}
    assert dict(counts[5]) == {"samples": 1, "exact": 0, "right_length": 0, "unreadable": 0, "wrong_letter": 0,
                               "too_long": 0}


def test_rendered_words_read_back_exact():
    """On the renderer's own images (every word the reader reads exactly), nothing is counted as a miss."""
    words = ["cat", "moon", "stone", "garden"]
    chunk = [prompt_of(w) for w in words]
    images = render(chunk, seed=0).expand(-1, 3, -1, -1, -1)
    counts = text_base_errors.count_readings(chunk, text_base_errors.read(images)[0])
    assert {n: (c["samples"], c["exact"], c["unreadable"], c["wrong_letter"]) for n, c in counts.items()} == {
        3: (1, 1, 0, 0), 4: (1, 1, 0, 0), 5: (1, 1, 0, 0), 6: (1, 1, 0, 0)}
