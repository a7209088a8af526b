"""The image world's exact checker: reads a generated 32x32 image back into objects and checks the prompt.

Like GenEval's detector-based checks (object present, count, colour, relative position), but exact for this
world, whose palette and shapes are known:

1. palette segmentation: each pixel goes to the nearest of the background and the four palette colours (RGB);
   pixels far from all of them (more than OFF_PALETTE) belong to no colour;
2. connected components (8-neighbourhood) of each colour; components of fewer than MIN_AREA pixels are debris,
   not objects (the smallest object the world draws covers about 25);
3. shape by template: the world's shapes have equal areas at equal radius, so a component's area gives its
   radius (sqrt(area / pi)) and its centroid its centre; the shape whose rendered mask at that centre and radius
   overlaps the component best (intersection over union) is its shape; position is the centroid;
4. the prompt's constraints on those objects (``constraints``).

Every scene the renderer draws is read back exactly (tests/image_world/test_image_world.py checks it over many scenes):
on the world's own images the checker is the ground truth, not an estimate of it.

Scores (Tensor[B] each, the columns evaluation reports for every oracle):
  ta        the share of the prompt's constraints met (partial credit; the prompt-alignment score)
  correct   1 when every constraint is met (GenEval's per-prompt accuracy)
  vq        1 - the share of foreground pixels outside the objects' one-pixel neighbourhood (debris, smears)
  mq        for stills, shape fidelity: the mean over objects of their best template overlap (IoU; there is no
            motion in an image, the column keeps the oracle's three dimensions)
  manifold  RMS distance in [-1, 1] units between the image and its palette-snapped copy
and one column per constraint kind, NaN where a prompt has no such constraint (``CONSTRAINTS``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.image_world.grammar import Scene, parse
from grpo_bench.image_world.render import SIZE
from grpo_bench.world.generator import SQUARE_HALF_SIDE, TRIANGLE_INRADIUS
from grpo_bench.world.vocab import BACKGROUND, COLORS, PALETTE, SHAPES

OFF_PALETTE = 0.35
"""RGB distance (in [0, 1] units) beyond which a pixel belongs to no colour."""
MIN_AREA = 8
CONSTRAINTS = ("object", "colour", "shape", "count", "position")
"""Constraint kinds: count prompts check object, colour, shape and count; relation prompts object and position."""
_EIGHT = np.ones((3, 3), dtype=bool)


@dataclass(frozen=True)
class Found:
    """One object read from an image."""

    colour: str
    shape: str
    cx: float
    cy: float
    area: int
    fit: float
    """Intersection over union of the component and its shape's template."""


def _as_images(images: Tensor) -> np.ndarray:
    """Float array [B, H, W, 3] in [0, 1] from Tensor[B, 3, 1, H, W] or [B, 3, H, W] in [-1, 1]."""
    t = torch.as_tensor(images).detach().float().cpu()
    given = tuple(t.shape)
    if t.ndim == 5 and t.shape[2] == 1:
        t = t[:, :, 0]
    if t.ndim != 4 or t.shape[1] != 3 or tuple(t.shape[2:]) != (SIZE, SIZE):
        raise UserError(f"image-world checker: images must be Tensor[B, 3, 1, {SIZE}, {SIZE}] (or [B, 3, {SIZE}, "
                        f"{SIZE}]) in [-1, 1], got shape {given}")
    return ((t.clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).numpy()


_COLOURS = np.array([BACKGROUND] + [PALETTE[c] for c in COLORS])  # [5, 3]; index 0 is the background


def segment(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(label [H, W]: 0 background, 1..4 palette colour, -1 off-palette; distance to that colour [H, W])."""
    dist = np.linalg.norm(image[:, :, None, :] - _COLOURS[None, None], axis=-1)
    label = dist.argmin(-1)
    nearest = dist.min(-1)
    return np.where(nearest > OFF_PALETTE, -1, label), nearest


def coverage(cx: float, cy: float, radius: float, size: int) -> np.ndarray:
    """Anti-aliased coverage [len(SHAPES), H, W] in [0, 1] of every shape at one centre and radius.

    The renderer's signed distances (world/generator.py ``shape_alpha``: circle, square, triangle, in SHAPES order)
    in float64, operation for operation (NumPy, but torch's sqrt), so every value is bit-identical to ``shape_alpha``'s
    (tests/image_world/test_checker_templates.py): a reward call fits several objects of each of 64 images, and
    torch's per-call cost on 32 x 32 arrays made these fits most of the checker's time."""
    grid = np.arange(size, dtype=np.float64) + 0.5
    dx, dy = grid[None, :] - cx, grid[:, None] - cy  # [1, W], [H, 1]
    # torch's float64 sqrt, not NumPy's: the two differ in the last bit on some inputs (torch's is not always
    # correctly rounded), and the renderer's circle is torch's
    circle = torch.sqrt(torch.from_numpy(dx**2 + dy**2)).numpy() - radius
    square = np.maximum(np.abs(dx), np.abs(dy)) - SQUARE_HALF_SIDE * radius
    tri = np.maximum(np.maximum(dy, 0.8660254 * dx - 0.5 * dy), -0.8660254 * dx - 0.5 * dy) - TRIANGLE_INRADIUS * radius
    return np.clip(0.5 - np.stack(np.broadcast_arrays(circle, square, tri)), 0.0, 1.0)


def _templates(cx: float, cy: float, radius: float, size: int) -> np.ndarray:
    """Binary masks [len(SHAPES), H, W] of every shape at one centre and radius (coverage above one half)."""
    return coverage(cx, cy, radius, size) > 0.5


def objects(label: np.ndarray) -> tuple[list[Found], np.ndarray]:
    """(the objects of a label map, the mask of their pixels)."""
    found, kept = [], np.zeros(label.shape, dtype=bool)
    for c, colour in enumerate(COLORS, start=1):
        comps, n = ndimage.label(label == c, structure=_EIGHT)
        for k in range(1, n + 1):
            mask = comps == k
            area = int(mask.sum())
            if area < MIN_AREA:
                continue
            ys, xs = np.nonzero(mask)
            cx, cy = float(xs.mean()) + 0.5, float(ys.mean()) + 0.5
            masks = _templates(cx, cy, float(np.sqrt(area / np.pi)), label.shape[0])
            iou = (masks & mask).sum((1, 2)) / np.maximum(1, (masks | mask).sum((1, 2)))
            best = int(iou.argmax())
            found.append(Found(colour, SHAPES[best], cx, cy, area, float(iou[best])))
            kept |= mask
    return found, kept


def relation_holds(a: Found, b: Found, relation: str) -> bool:
    """``a`` is ``relation`` ``b``: the displacement's dominant axis and sign (as GenEval's position check)."""
    dx, dy = b.cx - a.cx, b.cy - a.cy
    horizontal = abs(dx) > abs(dy)
    return {"left of": horizontal and dx > 0, "right of": horizontal and dx < 0,
            "above": not horizontal and dy > 0, "below": not horizontal and dy < 0}[relation]


def constraints(scene: Scene, found: list[Found]) -> dict[str, bool]:
    """Each constraint of the prompt, met or not, on the objects read from its image."""
    def kind(colour: str, shape: str) -> list[Found]:
        return [f for f in found if f.colour == colour and f.shape == shape]

    if scene.is_relation:
        first, second = kind(scene.colour, scene.shape), kind(scene.colour2, scene.shape2)
        return {"object": bool(first) and bool(second),
                "position": any(relation_holds(a, b, scene.relation) for a in first for b in second)}
    return {"object": bool(kind(scene.colour, scene.shape)),
            "colour": bool(found) and all(f.colour == scene.colour for f in found),
            "shape": bool(found) and all(f.shape == scene.shape for f in found),
            "count": len(kind(scene.colour, scene.shape)) == scene.count}


def check_one(image: np.ndarray, scene: Scene) -> dict[str, float]:
    """Every score of one image [H, W, 3] in [0, 1] against its scene."""
    label, _ = segment(image)
    found, kept = objects(label)
    met = constraints(scene, found)
    near = ndimage.binary_dilation(kept, structure=_EIGHT)
    foreground = label != 0
    stray = foreground & ~near
    snapped = _COLOURS[np.where(label < 0, 0, label)]
    out = {
        "ta": float(np.mean(list(met.values()))),
        "correct": float(all(met.values())),
        "vq": 1.0 - float(stray.sum()) / max(1, int(foreground.sum())),
        "mq": float(np.mean([f.fit for f in found])) if found else 0.0,
        "manifold": float(np.sqrt(np.mean((2 * (image - snapped)) ** 2))),
    }
    out.update({k: float(met[k]) if k in met else float("nan") for k in CONSTRAINTS})
    return out


def check(images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
    """{score: Tensor[B]} (module docstring) for images Tensor[B, 3, 1, 32, 32] in [-1, 1] and their prompts."""
    arr = _as_images(images)
    if len(prompts) != arr.shape[0]:
        raise UserError(f"image-world checker: {arr.shape[0]} images but {len(prompts)} prompts")
    scenes = [parse(p) for p in prompts]
    rows = [check_one(a, s) for a, s in zip(arr, scenes)]
    keys = rows[0].keys() if rows else ("ta", "correct", "vq", "mq", "manifold", *CONSTRAINTS)
    return {k: torch.tensor([r[k] for r in rows], dtype=torch.float32) for k in keys}


def read(image: Tensor) -> list[Found]:
    """The objects the checker reads from one image Tensor[3, 1, 32, 32] (or [3, 32, 32]): for inspection."""
    return objects(segment(_as_images(image[None])[0])[0])[0]

