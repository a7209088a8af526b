"""Corruptions of world videos, each ``f(videos, strength, seed) -> videos`` with strength in [0, 1].

Strength 0 returns the input unchanged; each oracle score falls monotonically as strength grows (tested).
They make the judge's training set span the quality range and are the oracle's test cases.

=================  ===========================================================  ==================
name               what strength 1 means                                        hurts
=================  ===========================================================  ==================
blur               Gaussian blur with sigma = 2 pixels                          VQ (edges)
jitter             per-frame random shifts, std 3 pixels (whole pixels)         MQ (velocity)
color_shift        object colour moved all the way to the palette's circumcentre VQ, TA (colour)
wrong_direction    motion rotated by 180 degrees (re-rendered from the fit)     TA (direction)
speckle            10% of pixels replaced by random colours (nested per seed)     VQ, MQ (flicker)
=================  ===========================================================  ==================
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.registry import Registry
from grpo_bench.world.generator import composite, palette_rgb, shape_alpha
from grpo_bench.world.vocab import BACKGROUND

Corruption = Callable[[Tensor, float, int], Tensor]
CORRUPTIONS: Registry[Corruption] = Registry("corruption")

BLUR_SIGMA = 2.0
JITTER_STD = 3.0
SPECKLE_MAX = 0.1


def _check(strength: float) -> float:
    if not (isinstance(strength, (int, float)) and 0.0 <= strength <= 1.0):
        raise UserError(f"corruption strength must be a number in [0, 1], got {strength!r}")
    return float(strength)


def _frames(videos: Tensor) -> Tensor:
    """[B, 3, F, H, W] -> [B*F, 3, H, W]."""
    b, c, f, h, w = videos.shape
    return videos.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)


def _unframes(x: Tensor, b: int) -> Tensor:
    bf, c, h, w = x.shape
    return x.reshape(b, bf // b, c, h, w).permute(0, 2, 1, 3, 4)


@CORRUPTIONS.register("blur")
def blur(videos: Tensor, strength: float, seed: int = 0) -> Tensor:
    """Spatial Gaussian blur of every frame, sigma = strength * BLUR_SIGMA pixels (edges replicated)."""
    sigma = _check(strength) * BLUR_SIGMA
    if sigma == 0:
        return videos.clone()
    radius = max(1, math.ceil(3 * sigma))
    x = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    k = (k / k.sum()).to(videos.dtype)
    frames = _frames(videos)
    c = frames.shape[1]
    out = F.pad(frames, (radius, radius, 0, 0), mode="replicate")
    out = F.conv2d(out, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    out = F.pad(out, (0, 0, radius, radius), mode="replicate")
    out = F.conv2d(out, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
    return _unframes(out, videos.shape[0])


@CORRUPTIONS.register("jitter")
def jitter(videos: Tensor, strength: float, seed: int = 0) -> Tensor:
    """Camera shake: every frame shifted by a random whole-pixel offset, std strength * JITTER_STD.

    The offsets are round(strength * n) for one fixed draw n per seed, so they grow with strength."""
    s = _check(strength) * JITTER_STD
    b, _, f, h, w = videos.shape
    g = torch.Generator().manual_seed(int(seed))
    shift = torch.round(s * torch.randn(b * f, 2, generator=g))  # [B*F, 2] pixels (dx, dy)
    theta = torch.zeros(b * f, 2, 3)
    theta[:, 0, 0] = 1
    theta[:, 1, 1] = 1
    # Output pixel p samples input p - shift; normalised coordinates span 2 over the frame.
    theta[:, 0, 2] = -2 * shift[:, 0] / w
    theta[:, 1, 2] = -2 * shift[:, 1] / h
    frames = _frames(videos).float()
    grid = F.affine_grid(theta, list(frames.shape), align_corners=False)
    out = F.grid_sample(frames, grid, mode="nearest", padding_mode="border", align_corners=False)
    return _unframes(out, b).to(videos.dtype)


@CORRUPTIONS.register("color_shift")
def color_shift(videos: Tensor, strength: float, seed: int = 0) -> Tensor:
    """Move the object's colour a fraction ``strength`` of the way to the point equidistant from all
    palette colours, so the distance to the nearest palette colour grows linearly with strength."""
    s = _check(strength)
    pal = palette_rgb()
    target = _circumcentre(pal)
    bg = torch.tensor(BACKGROUND)[None, :, None, None, None]
    d = (videos.float() + 1) / 2 - bg  # [B, 3, F, H, W]
    e = pal - bg[0, :, 0, 0, 0]  # [K, 3]
    # Each pixel's coverage and colour: its best palette direction (exact on rendered videos).
    proj = torch.einsum("bcfhw,kc->bkfhw", d, e) / (e**2).sum(1)[None, :, None, None, None]
    alpha = proj.clamp(0, 1)
    err = ((d[:, None] - alpha[:, :, None] * e[None, :, :, None, None, None]) ** 2).sum(2)
    k = err.argmin(1)  # [B, F, H, W]
    a = alpha.gather(1, k[:, None]).squeeze(1)  # [B, F, H, W]
    towards = (target[None] - pal)[k].permute(0, 4, 1, 2, 3)  # [B, 3, F, H, W]
    return (videos.float() + 2 * s * a[:, None] * towards).to(videos.dtype)


def _circumcentre(points: Tensor) -> Tensor:
    """The point equidistant from 4 points in R^3 (the palette): Tensor[3]."""
    p = points.double()
    m = 2 * (p[1:] - p[0])
    rhs = (p[1:] ** 2).sum(1) - (p[0] ** 2).sum()
    return torch.linalg.solve(m, rhs).float()


@CORRUPTIONS.register("wrong_direction")
def wrong_direction(videos: Tensor, strength: float, seed: int = 0) -> Tensor:
    """Rotate the object's motion by strength * 180 degrees about its mid-clip position and re-render it
    from the oracle's fit (exact on rendered videos); the path is translated to stay inside the frame."""
    from grpo_bench.world.oracle import fit

    angle = _check(strength) * math.pi
    if angle == 0:
        return videos.clone()
    b, _, f, h, w = videos.shape
    ft = fit(videos)
    t = torch.arange(f, dtype=torch.float32)
    pos = ft.start[:, None] + ft.velocity[:, None] * t[None, :, None]  # [B, F, 2] fitted path
    mid = pos.mean(1, keepdim=True)
    rot = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    new = mid + (pos - mid) @ rot.T
    radius = (ft.area.mean(1) / math.pi).sqrt()
    margin = (radius + 0.5)[:, None]
    lo, hi = new.min(1).values, new.max(1).values  # [B, 2]
    shift = (margin - lo).clamp(min=0) - (hi - (w - margin)).clamp(min=0)
    new = new + shift[:, None]
    alpha = shape_alpha(ft.shape, new[..., 0], new[..., 1], radius, w)
    return composite(alpha, ft.rgb.clamp(0, 1)).to(videos.dtype)


@CORRUPTIONS.register("speckle")
def speckle(videos: Tensor, strength: float, seed: int = 0) -> Tensor:
    """Replace a fraction ``strength * SPECKLE_MAX`` of pixels, independently per frame, by random colours. The
    replaced set grows with strength (pixels are ranked once per seed), so damage is nested."""
    s = _check(strength)
    b, c, f, h, w = videos.shape
    g = torch.Generator().manual_seed(int(seed))
    rank = torch.rand(b, 1, f, h, w, generator=g) / SPECKLE_MAX
    colours = torch.rand(b, c, f, h, w, generator=g) * 2 - 1
    return torch.where(rank < s, colours.to(videos.dtype), videos)


def corrupt(name: str, videos: Tensor, strength: float, seed: int = 0) -> Tensor:
    """Apply the registered corruption ``name``."""
    return CORRUPTIONS.get(name)(videos, strength, seed)


def shuffle_frames(videos: Tensor, strength: float, seed: int = 0) -> Tensor:
    """Temporal jitter: round(strength * F) randomly chosen frames of each video trade places (a cyclic shift
    among them, so any two or more chosen frames really move). Not in CORRUPTIONS: MQ's velocity fit does not
    fall monotonically with the number of moved frames; the judge trains on it and ``judge_check`` tests it."""
    s = _check(strength)
    b, _, f, _, _ = videos.shape
    k = round(s * f)
    out = videos.clone()
    if k < 2:
        return out
    g = torch.Generator().manual_seed(int(seed))
    for i in range(b):
        chosen = torch.randperm(f, generator=g)[:k]
        out[i, :, chosen] = videos[i, :, chosen.roll(1)]
    return out
