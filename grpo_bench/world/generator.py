"""Vectorised, anti-aliased rendering of the world's videos.

A video is one object (circle, square or triangle) of a palette colour on a dark background,
moving at constant speed in one of four directions. Coverage comes from a signed distance
field in pixels: alpha = clamp(0.5 - sdf, 0, 1), a one-pixel anti-aliased edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.world.vocab import BACKGROUND, COLORS, DIRECTIONS, MOTIONS, PALETTE, parse

SIZES = (16, 24)
# Object "radius" and speed as fractions of the frame size (speed per frame).
RADIUS_RANGE = (0.14, 0.22)
SPEED_RANGE = (0.045, 0.085)
TRIANGLE_INRADIUS = 0.7776  # sqrt(pi / (3*sqrt(3))): equal area to the circle of the same radius
SQUARE_HALF_SIDE = 0.8862  # sqrt(pi) / 2: equal area


@dataclass
class VideoParams:
    """Per-video parameters, each Tensor[B] (pixel units; positions at frame 0)."""

    color: Tensor  # long, index into COLORS
    shape: Tensor  # long, index into SHAPES
    motion: Tensor  # long, index into MOTIONS
    cx: Tensor
    cy: Tensor
    radius: Tensor
    speed: Tensor


def sample_params(prompts: list[str], seed: int, size: int = 24, frames: int = 8) -> VideoParams:
    """Random start, radius and speed per prompt, drawn so the object stays inside the frame."""
    idx = torch.tensor([parse(p) for p in prompts], dtype=torch.long).reshape(-1, 3)
    g = torch.Generator().manual_seed(int(seed))
    b = len(prompts)
    u = torch.rand(b, 4, generator=g, dtype=torch.float64)
    radius = size * (RADIUS_RANGE[0] + (RADIUS_RANGE[1] - RADIUS_RANGE[0]) * u[:, 0])
    speed = size * (SPEED_RANGE[0] + (SPEED_RANGE[1] - SPEED_RANGE[0]) * u[:, 1])
    dirs = torch.tensor([DIRECTIONS[m] for m in MOTIONS], dtype=torch.float64)[idx[:, 2]]
    travel = speed * (frames - 1)
    margin = radius + 0.5
    centre = []
    for axis in range(2):
        d = dirs[:, axis]
        lo = margin + torch.where(d < 0, travel, torch.zeros_like(travel))
        hi = size - margin - torch.where(d > 0, travel, torch.zeros_like(travel))
        centre.append(lo + (hi - lo).clamp(min=0) * u[:, 2 + axis])
    return VideoParams(idx[:, 0], idx[:, 1], idx[:, 2], centre[0], centre[1], radius, speed)


def shape_alpha(shape: Tensor, cx: Tensor, cy: Tensor, radius: Tensor, size: int) -> Tensor:
    """Anti-aliased coverage Tensor[B, F, H, W] in [0, 1] of shapes centred at arbitrary per-frame points.

    shape: long Tensor[B]; cx, cy: Tensor[B, F] (pixels); radius: Tensor[B] or Tensor[B, F]. Differentiable in
    the float inputs (the oracle fits and re-renders with it)."""
    grid = torch.arange(size, dtype=cx.dtype, device=cx.device) + 0.5
    dx = grid[None, None, None, :] - cx[:, :, None, None]  # [B, F, 1, W]
    dy = grid[None, None, :, None] - cy[:, :, None, None]  # [B, F, H, 1]
    r = radius[:, None, None, None] if radius.ndim == 1 else radius[:, :, None, None]
    circle = torch.sqrt(dx**2 + dy**2) - r
    square = torch.maximum(dx.abs(), dy.abs()) - SQUARE_HALF_SIDE * r
    # Equilateral triangle pointing up: outward normals (0, 1), (±sin 60°, -cos 60°).
    tri = torch.maximum(torch.maximum(dy, 0.8660254 * dx - 0.5 * dy), -0.8660254 * dx - 0.5 * dy)
    tri = tri - TRIANGLE_INRADIUS * r
    sdf = torch.stack(torch.broadcast_tensors(circle, square, tri), dim=1)  # [B, 3, F, H, W]
    sdf = sdf.gather(1, shape[:, None, None, None, None].expand(-1, 1, *sdf.shape[2:])).squeeze(1)
    return (0.5 - sdf).clamp(0.0, 1.0)


def composite(alpha: Tensor, colour: Tensor) -> Tensor:
    """Videos Tensor[B, 3, F, H, W] in [-1, 1]: coverage alpha [B, F, H, W] of RGB colour [B, 3] (in [0, 1])
    over the world's background."""
    bg = torch.tensor(BACKGROUND, dtype=alpha.dtype, device=alpha.device)[None, :, None, None, None]
    a = alpha[:, None]  # [B, 1, F, H, W]
    video = bg * (1 - a) + colour[:, :, None, None, None] * a
    return video * 2 - 1


def palette_rgb(dtype: torch.dtype = torch.float32) -> Tensor:
    """The palette as Tensor[len(COLORS), 3] in [0, 1], in COLORS order."""
    return torch.tensor([PALETTE[c] for c in COLORS], dtype=dtype)


def direction_vectors(dtype: torch.dtype = torch.float32) -> Tensor:
    """Unit motion directions Tensor[len(MOTIONS), 2] (dx, dy), in MOTIONS order."""
    return torch.tensor([DIRECTIONS[m] for m in MOTIONS], dtype=dtype)


def render_params(p: VideoParams, size: int = 24, frames: int = 8) -> Tensor:
    """Render Tensor[B, 3, F, H, W] in [-1, 1] from explicit parameters (differentiable in floats)."""
    dirs = direction_vectors(p.cx.dtype)[p.motion]  # [B, 2]
    t = torch.arange(frames, dtype=p.cx.dtype)
    cx = p.cx[:, None] + dirs[:, 0, None] * p.speed[:, None] * t  # [B, F]
    cy = p.cy[:, None] + dirs[:, 1, None] * p.speed[:, None] * t
    alpha = shape_alpha(p.shape, cx, cy, p.radius, size)
    return composite(alpha, palette_rgb(p.cx.dtype)[p.color]).float()


def render(prompts: list[str], seed: int, size: int = 24, frames: int = 8) -> Tensor:
    """Videos Tensor[B, 3, F, H, W] in [-1, 1] for the prompts; deterministic per seed."""
    if size not in SIZES:
        raise UserError(f"video size must be one of {SIZES}, got {size!r}")
    if not isinstance(frames, int) or frames < 2:
        raise UserError(f"frames must be an integer >= 2, got {frames!r}")
    return render_params(sample_params(prompts, seed, size, frames), size, frames)
