"""The image world's exact checker (grpo_bench/image_world/checker.py) on one reward call of the field_image
compositional budget: 64 images (8 prompts' groups of 8), rendered scenes of training prompts, with the shape fits
computed in NumPy (``coverage``, today's) and with the renderer's torch ``shape_alpha`` (the checker before it);
both read the same scores (tests/image_world/test_checker_templates.py). Reported as pytest-benchmark stats per
call; compare the two in one run:

    python -m pytest benchmarks/test_checker_speed.py -p no:randomly --benchmark-columns=min,median,max
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_bench.image_world import checker
from grpo_bench.image_world.grammar import prompts
from grpo_bench.image_world.render import render
from grpo_bench.world.generator import shape_alpha
from grpo_bench.world.vocab import SHAPES

PROMPTS = [p for p in prompts("train")[::9] for _ in range(8)][:64]
IMAGES = render(PROMPTS, seed=0)


def _torch_templates(cx: float, cy: float, radius: float, size: int) -> np.ndarray:
    n = len(SHAPES)
    at = torch.full((n, 1), 0.0, dtype=torch.float64)
    alpha = shape_alpha(torch.arange(n), at + cx, at + cy, torch.full((n,), radius, dtype=torch.float64), size)
    return alpha[:, 0].numpy() > 0.5


@pytest.mark.benchmark(group="checker, one reward call (64 images)")
def test_check_numpy_fits(benchmark):
    torch.set_num_threads(1)
    assert float(checker.check(IMAGES, PROMPTS)["correct"].mean()) == 1.0  # rendered scenes read back exactly
    benchmark.pedantic(checker.check, args=(IMAGES, PROMPTS), rounds=5, iterations=1)


@pytest.mark.benchmark(group="checker, one reward call (64 images)")
def test_check_torch_fits(benchmark, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setattr(checker, "_templates", _torch_templates)
    assert float(checker.check(IMAGES, PROMPTS)["correct"].mean()) == 1.0
    benchmark.pedantic(checker.check, args=(IMAGES, PROMPTS), rounds=5, iterations=1)
