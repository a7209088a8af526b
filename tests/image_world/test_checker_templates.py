"""The checker's shape templates (image_world/checker.py ``coverage``, ``_templates``) are the renderer's own shapes:
coverage bit-identical to world/generator.py ``shape_alpha`` (the torch code it replaced for speed), so every
score, and every training run that reads them, is unchanged."""

from __future__ import annotations

import numpy as np
import torch

from grpo_bench.image_world import checker
from grpo_bench.image_world.render import SIZE
from grpo_bench.world.generator import shape_alpha
from grpo_bench.world.vocab import SHAPES


def rendered_coverage(cx: float, cy: float, radius: float, size: int) -> np.ndarray:
    """The renderer's coverage of every shape at one centre and radius, as the checker computed it before."""
    n = len(SHAPES)
    at = torch.full((n, 1), 0.0, dtype=torch.float64)
    alpha = shape_alpha(torch.arange(n), at + cx, at + cy, torch.full((n,), radius, dtype=torch.float64), size)
    return alpha[:, 0].numpy()


def rendered_templates(cx: float, cy: float, radius: float, size: int) -> np.ndarray:
    """The masks as the checker computed them before: the renderer's coverage above one half."""
    return rendered_coverage(cx, cy, radius, size) > 0.5


def test_coverage_and_templates_are_the_renderers_shapes_bit_for_bit():
    rng = np.random.default_rng(0)
    cases = [(rng.uniform(0, SIZE), rng.uniform(0, SIZE), rng.uniform(1.5, 6.0)) for _ in range(2000)]
    # centres on pixel centres and edges, and radii that put edges on the grid: where rounding could differ
    cases += [(x + d, y + d, r) for x in (3, 16, 29) for y in (4, 15) for d in (0.0, 0.5) for r in (2.0, 3.5, 4.0)]
    edges = 0
    for cx, cy, r in cases:
        mine, ref = checker.coverage(cx, cy, r, SIZE), rendered_coverage(cx, cy, r, SIZE)
        assert mine.dtype == ref.dtype == np.float64 and mine.shape == ref.shape == (len(SHAPES), SIZE, SIZE)
        assert np.array_equal(mine, ref), (cx, cy, r)  # every anti-aliased edge value, to the last bit
        assert np.array_equal(checker._templates(cx, cy, r, SIZE), rendered_templates(cx, cy, r, SIZE))
        edges += int(((ref > 0) & (ref < 1)).sum())
    assert edges > 30 * len(cases)  # the comparison covered many partial-coverage values (66 a case here)


def test_every_score_of_noisy_images_is_unchanged(monkeypatch):
    """Random blobs of palette colours with noise: many components of every size, each scored both ways."""
    from grpo_bench.image_world.grammar import prompts

    gen = torch.Generator().manual_seed(1)
    images = torch.rand(48, 3, 1, SIZE, SIZE, generator=gen) * 2 - 1
    palette = torch.tensor(checker._COLOURS[1:], dtype=torch.float32) * 2 - 1  # [4, 3]
    pick = torch.randint(0, 4, (48, 1, 8, 8), generator=gen)
    blobs = palette[pick].permute(0, 4, 1, 2, 3).repeat_interleave(4, -1).repeat_interleave(4, -2)
    images = torch.where(torch.rand(48, 1, 1, SIZE, SIZE, generator=gen) < 0.8, blobs, images)
    names = (prompts("train") * 2)[:48]
    now = checker.check(images, names)
    monkeypatch.setattr(checker, "_templates", rendered_templates)
    before = checker.check(images, names)
    assert sum(len(checker.read(im)) for im in images) > 48  # objects were read and fitted
    for key, value in before.items():  # exactly equal, NaN where a constraint does not apply
        torch.testing.assert_close(now[key], value, rtol=0, atol=0, equal_nan=True, msg=key)
