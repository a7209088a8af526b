"""Procedural scenes of the image world: 32x32 RGB stills in [-1, 1] of the objects a prompt asks for.

Objects are the video world's anti-aliased shapes (grpo_bench/world/generator.py ``shape_alpha``) on its
background. Placement is drawn so that the exact checker can read every scene back: objects never touch (a gap of
at least GAP pixels between their bounding circles, so connected components separate them), stay inside the
frame, and two related objects are displaced mostly along the relation's axis (|off-axis| <= half the on-axis
distance), so "left of" is unambiguous.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.image_world.grammar import Scene, parse
from grpo_bench.world.generator import composite, palette_rgb, shape_alpha
from grpo_bench.world.vocab import COLORS, SHAPES

SIZE = 32
RADIUS_RANGE = (3.4, 4.0)
"""Shape 'radius' in pixels (a circle's radius; squares and triangles of equal area): at least about 36 pixels
an object, enough for its shape to be read back (a 25-pixel disc and square are the same blob)."""
EXTENT = {"circle": 1.0, "square": 1.2534, "triangle": 1.5552}
"""Furthest reach of each shape from its centre, in radii (half-diagonal sqrt(pi/2), circumradius 2 x 0.7776)."""
GAP = 2.0
"""Least distance in pixels between two objects' bounding circles."""
AXIS = {"left of": (1.0, 0.0), "right of": (-1.0, 0.0), "above": (0.0, 1.0), "below": (0.0, -1.0)}
"""Unit direction from the first object to the second for each relation (image y grows downwards)."""
_TRIES = 200


def _fits(centres: list[tuple[float, float]], reach: list[float], x: float, y: float, r: float) -> bool:
    return all((x - cx) ** 2 + (y - cy) ** 2 >= (r + rc + GAP) ** 2 for (cx, cy), rc in zip(centres, reach))


def _related(scene: Scene, x: np.ndarray, y: np.ndarray, reach: np.ndarray) -> bool:
    """The second object lies along the relation's axis from the first, by at least the gap, at most half as far
    off the axis as along it."""
    ax, ay = AXIS[scene.relation]
    dx, dy = x[1] - x[0], y[1] - y[0]
    along = dx * ax + dy * ay
    across = abs(dx * ay - dy * ax)
    return along >= reach[0] + reach[1] + GAP and across <= 0.5 * along


def layout(scene: Scene, rng: np.random.Generator, size: int = SIZE) -> list[tuple[int, int, float, float, float]]:
    """[(colour, shape, cx, cy, radius)] of one scene, drawn from ``rng``: objects placed one at a time (up to
    _TRIES draws each), the whole scene drawn again when one cannot be placed."""
    kinds = [(scene.colour, scene.shape)] * scene.count
    if scene.is_relation:
        kinds = [(scene.colour, scene.shape), (scene.colour2, scene.shape2)]
    for _ in range(_TRIES):
        radius = rng.uniform(*RADIUS_RANGE, size=len(kinds))
        reach = np.array([EXTENT[s] for _, s in kinds]) * radius
        x, y = np.zeros(len(kinds)), np.zeros(len(kinds))
        for i in range(len(kinds)):
            lo, hi = reach[i] + 1.0, size - reach[i] - 1.0
            for _ in range(_TRIES):
                x[i], y[i] = rng.uniform(lo, hi, size=2)
                if _fits(list(zip(x[:i], y[:i])), list(reach[:i]), x[i], y[i], reach[i]) and (
                        i == 0 or not scene.is_relation or _related(scene, x, y, reach)):
                    break
            else:
                break
        else:
            return [(COLORS.index(c), SHAPES.index(s), float(x[i]), float(y[i]), float(radius[i]))
                    for i, (c, s) in enumerate(kinds)]
    raise RuntimeError(f"no layout found for {scene.text()!r}")  # cannot happen at SIZE 32 (tested on every scene)


def render_objects(objects: list[list[tuple[int, int, float, float, float]]], size: int = SIZE) -> Tensor:
    """Images Tensor[B, 3, 1, size, size] in [-1, 1], one per list of (colour, shape, cx, cy, radius)."""
    flat = [(b, *o) for b, objs in enumerate(objects) for o in objs]
    owner = torch.tensor([f[0] for f in flat], dtype=torch.long)
    colour, shape = (torch.tensor([f[k] for f in flat], dtype=torch.long) for k in (1, 2))
    cx, cy, radius = (torch.tensor([f[k] for f in flat], dtype=torch.float64) for k in (3, 4, 5))
    alpha = shape_alpha(shape, cx[:, None], cy[:, None], radius, size)[:, 0]  # [N, H, W]
    # Objects never overlap, so each pixel's coverage sums over the objects of its image.
    coverage = torch.zeros(len(objects), size, size, dtype=torch.float64).index_add_(0, owner, alpha)
    rgb = torch.zeros(len(objects), 3, size, size, dtype=torch.float64)
    rgb.index_add_(0, owner, alpha[:, None] * palette_rgb(torch.float64)[colour][:, :, None, None])
    weight = coverage.clamp(min=1e-12)[:, None]
    flat_colour = (rgb / weight).permute(0, 2, 3, 1)  # per-pixel object colour where covered
    video = composite(coverage[:, None], torch.zeros(len(objects), 3, dtype=torch.float64))  # background part
    video = video + 2 * (coverage[:, None] * flat_colour.permute(0, 3, 1, 2))[:, :, None]
    return video.float()


def render(prompts: list[str], seed: int, size: int = SIZE) -> Tensor:
    """Images Tensor[B, 3, 1, 32, 32] in [-1, 1] for the prompts; deterministic per seed."""
    if size != SIZE:
        raise UserError(f"image-world size must be {SIZE}, got {size!r}")
    rng = np.random.default_rng(int(seed))
    return render_objects([layout(parse(p), rng, size) for p in prompts], size)
