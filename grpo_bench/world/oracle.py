"""The exact oracle: ground-truth quality of world videos, measured against the known generator.

Every video is explained by the generator's own model: one object of colour c and coverage alpha over
the background, ``u = bg + alpha * (c - bg)``. The oracle recovers alpha and c, reads the object's
per-frame centroid and area off alpha, fits the generator's parameters (palette colour, shape, axis
direction, start, radius, speed) and scores what the parameters cannot explain:

* VQ (per frame): clean background, crisp edges (alpha matches an anti-aliased template), palette colour.
* MQ (over time): constant velocity, constant size, constant colour, no flicker of the background.
* TA (against the prompt): soft colour, shape and direction agreement, and an object of plausible size.
* manifold: RMS distance (in [-1, 1] units) to the best re-render by ``render_params``.

Each score is a product of sub-scores ``1 / (1 + (x / scale)^2)`` of interpretable errors x, so a score
is 1 on rendered videos, falls monotonically as any error grows, and is ~0 on noise. Scales are in
``SCALES``; the tests pin the resulting thresholds (rendered >= 0.95, noise <= 0.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_bench.world.generator import RADIUS_RANGE, SPEED_RANGE, composite, direction_vectors, palette_rgb, shape_alpha
from grpo_bench.world.vocab import BACKGROUND, SHAPES, parse

SCALES = {
    # VQ
    "bg": 0.05,  # RMS deviation of background pixels from the background colour ([0, 1] units)
    "edge": 0.15,  # relative squared error of alpha against the best per-frame template
    "palette": 0.12,  # distance of the object's colour to the nearest palette colour ([0, 1] RGB)
    # MQ
    "velocity": 0.06,  # RMS centroid deviation from a constant-velocity path (fraction of frame size)
    "size": 0.25,  # coefficient of variation of the object's area over frames
    "constancy": 0.08,  # RMS change of the object's colour over frames ([0, 1] RGB)
    "flicker": 0.05,  # RMS frame-to-frame change of background pixels ([0, 1] units)
    # TA
    "color": 0.25,  # distance of the object's colour to the prompted palette colour
    "shape": 0.03,  # excess relative template error of the prompted shape over the best shape
}
_EPS = 1e-6


def _score(x: Tensor, scale: float) -> Tensor:
    """1 / (1 + (x/scale)^2): flat at 0 (rendered videos score ~1 despite anti-aliasing noise) and a heavy
    tail, so moderately bad videos (what a base model makes) keep graded, non-zero scores."""
    return 1.0 / (1.0 + (x / scale) ** 2)


@dataclass
class Fit:
    """What the oracle reads off a batch of videos (B videos, F frames)."""

    alpha: Tensor  # [B, F, H, W] object coverage
    rgb: Tensor  # [B, 3] object colour, [0, 1]
    rgb_frames: Tensor  # [B, F, 3] per-frame object colour
    color: Tensor  # [B] nearest palette colour (index into COLORS)
    area: Tensor  # [B, F] pixels
    cx: Tensor  # [B, F] centroid
    cy: Tensor  # [B, F]
    shape_err: Tensor  # [B, 3] relative alpha error against each shape's per-frame template
    shape: Tensor  # [B] best shape
    velocity: Tensor  # [B, 2] least-squares centroid velocity, pixels per frame
    start: Tensor  # [B, 2] fitted centroid at frame 0
    path_err: Tensor  # [B] RMS centroid deviation from the constant-velocity path, pixels
    templates: Tensor  # [B, F, H, W] per-frame template of the best shape


def fit(videos: Tensor) -> Fit:
    """Fit the generator's model to videos Tensor[B, 3, F, H, W] in [-1, 1] (no gradients needed)."""
    v = videos.detach().float()
    b, _, f, h, w = v.shape
    bg = torch.tensor(BACKGROUND)[None, :, None, None, None]
    d = (v + 1) / 2 - bg  # [B, 3, F, H, W] offset from the background
    # Colour: the palette direction that explains the most, then the least-squares colour along alpha.
    e = palette_rgb() - bg[0, :, 0, 0, 0]  # [K, 3]
    proj = torch.einsum("bcfhw,kc->bkfhw", d, e) / (e**2).sum(1)[None, :, None, None, None]
    a_k = proj.clamp(0, 1)  # [B, K, F, H, W]
    resid = ((d[:, None] - a_k[:, :, None] * e[None, :, :, None, None, None]) ** 2).sum(2).flatten(2).sum(2)
    color = resid.argmin(1)  # [B]
    a0 = a_k[torch.arange(b), color]  # [B, F, H, W]
    rgb_off = (d * a0[:, None]).flatten(2).sum(2) / ((a0**2).flatten(1).sum(1)[:, None] + _EPS)  # [B, 3]
    # Coverage along the fitted colour. alpha * colour has a scale ambiguity; the object's interior is
    # fully covered, so the scale is fixed by alpha = 1 at the brightest pixels (mean of each frame's top
    # 3, median over frames; robust to a few outliers). Exact on rendered videos, colour-agnostic otherwise.
    a = torch.einsum("bcfhw,bc->bfhw", d, rgb_off) / ((rgb_off**2).sum(1) + _EPS)[:, None, None, None]
    peak = a.flatten(2).topk(3, dim=2).values.mean(2).median(1).values.clamp(min=_EPS)  # [B]
    rgb_off = rgb_off * peak[:, None]
    alpha = (a / peak[:, None, None, None]).clamp(0, 1)
    rgb_frames = (d * alpha[:, None]).flatten(3).sum(3) / ((alpha**2).flatten(2).sum(2)[:, None] + _EPS)  # [B,3,F]
    rgb = rgb_off + bg[0, :, 0, 0, 0]
    rgb_frames = rgb_frames.transpose(1, 2) + bg[0, :, 0, 0, 0]
    # Per-frame centroid and area (pixel centres at i + 0.5, as rendered).
    area = alpha.flatten(2).sum(2)  # [B, F]
    ys = torch.arange(h, dtype=torch.float32) + 0.5
    xs = torch.arange(w, dtype=torch.float32) + 0.5
    cx = (alpha.sum(2) * xs).sum(2) / (area + _EPS)
    cy = (alpha.sum(3) * ys).sum(2) / (area + _EPS)
    # Constant-velocity path: least squares over frames.
    t = torch.arange(f, dtype=torch.float32)
    tc = t - t.mean()
    pos = torch.stack([cx, cy], -1)  # [B, F, 2]
    vel = (tc[None, :, None] * pos).sum(1) / (tc**2).sum()
    start = pos.mean(1) - vel * t.mean()
    path = start[:, None] + vel[:, None] * t[None, :, None]
    path_err = ((pos - path) ** 2).sum(-1).mean(1).sqrt()
    # Shape: compare alpha with each shape's template at the measured centroid and equal-area radius.
    radius = (area / math.pi).sqrt()
    errs, temps = [], []
    for s in range(len(SHAPES)):
        tmpl = shape_alpha(torch.full((b,), s, dtype=torch.long), cx, cy, radius, w if w == h else max(h, w))
        temps.append(tmpl)
        errs.append(((alpha - tmpl) ** 2).flatten(1).sum(1) / ((tmpl**2).flatten(1).sum(1) + _EPS))
    shape_err = torch.stack(errs, 1)  # [B, 3]
    shape = shape_err.argmin(1)
    templates = torch.stack(temps, 1)[torch.arange(b), shape]
    return Fit(alpha, rgb, rgb_frames, color, area, cx, cy, shape_err, shape, vel, start, path_err, templates)


def _dilate(mask: Tensor, k: int = 1) -> Tensor:
    """Binary dilation of Tensor[B, F, H, W] by k pixels (max-pool)."""
    m = mask.float().flatten(0, 1)[:, None]
    m = torch.nn.functional.max_pool2d(m, 2 * k + 1, stride=1, padding=k)
    return m[:, 0].reshape(mask.shape) > 0


def subscores(videos: Tensor, prompts: list[str], fitted: Fit | None = None) -> dict[str, Tensor]:
    """Every sub-score (each Tensor[B] in [0, 1]) and the measured errors behind them."""
    ft = fitted if fitted is not None else fit(videos)
    v = videos.detach().float()
    b, _, f, h, w = v.shape
    size = float(max(h, w))
    idx = torch.tensor([parse(p) for p in prompts], dtype=torch.long).reshape(-1, 3)
    bg = torch.tensor(BACKGROUND)[None, :, None, None, None]
    d = (v + 1) / 2 - bg
    # Background: pixels at least a pixel away from the fitted object in that frame.
    bg_mask = ~_dilate(ft.templates > 0, 1)  # [B, F, H, W]
    n_bg = bg_mask.flatten(1).sum(1).clamp(min=1)
    bg_rms = (((d**2).sum(1) / 3) * bg_mask).flatten(1).sum(1).div(n_bg).sqrt()
    edge = ((ft.alpha - ft.templates) ** 2).flatten(1).sum(1) / ((ft.templates**2).flatten(1).sum(1) + _EPS)
    pal = palette_rgb()
    palette_dist = torch.cdist(ft.rgb_frames, pal[None].expand(b, -1, -1)).min(-1).values.mean(1)  # [B]
    # Flicker: background pixels (away from the object in both frames) that change between frames.
    still = bg_mask[:, 1:] & bg_mask[:, :-1]
    dd = ((d[:, :, 1:] - d[:, :, :-1]) ** 2).sum(1) / 3
    flicker = (dd * still).flatten(1).sum(1).div(still.flatten(1).sum(1).clamp(min=1)).sqrt()
    mean_area = ft.area.mean(1)
    size_cv = ft.area.std(1) / (mean_area + _EPS)
    constancy = ((ft.rgb_frames - ft.rgb[:, None]) ** 2).sum(-1).mean(1).sqrt()
    # Prompt agreement.
    color_dist = (ft.rgb - pal[idx[:, 0]]).norm(dim=1)
    shape_excess = ft.shape_err[torch.arange(b), idx[:, 1]] - ft.shape_err.min(1).values
    dirs = direction_vectors()
    along = (ft.velocity * dirs[idx[:, 2]]).sum(1)
    across = (ft.velocity - along[:, None] * dirs[idx[:, 2]]).norm(dim=1)
    v_min = SPEED_RANGE[0] * size
    # Direction: full credit once the object moves at >= 3/4 of the slowest generated speed along the
    # prompted axis; the sideways drift is penalised relative to the forward speed.
    forward = ((along / v_min - 0.25) / 0.5).clamp(0, 1)
    sideways = torch.exp(-((across / along.abs().clamp(min=_EPS)) ** 2) / 0.5)
    r_lo, r_hi = RADIUS_RANGE[0] * size, RADIUS_RANGE[1] * size
    # An object of plausible size: area within a factor 1.5 of the generated range, soft outside.
    a_lo, a_hi = math.pi * r_lo**2 / 1.5, math.pi * r_hi**2 * 1.5
    size_err = torch.where(mean_area < a_lo, (a_lo - mean_area) / a_lo, (mean_area - a_hi).clamp(min=0) / a_hi)
    best_dir = (ft.velocity @ dirs.T).argmax(1)
    errors = {
        "bg": bg_rms, "edge": edge, "palette": palette_dist, "velocity": ft.path_err / size, "size": size_cv,
        "constancy": constancy, "flicker": flicker, "color": color_dist, "shape": shape_excess,
    }
    out = {k: _score(x, SCALES[k]) for k, x in errors.items()}
    out.update({f"err_{k}": x for k, x in errors.items()})
    out.update({
        "direction": forward * sideways,
        "presence": _score(size_err, 0.5),
        "color_ok": (ft.color == idx[:, 0]).float(),
        "shape_ok": (ft.shape == idx[:, 1]).float(),
        "direction_ok": ((best_dir == idx[:, 2]) & (along > 0.5 * v_min)).float(),
    })
    return out


def manifold_distance(videos: Tensor, ft: Fit, refine_steps: int = 0) -> Tensor:
    """RMS distance Tensor[B] (in [-1, 1] units) to the best re-render within the generator's family:
    palette colour, fitted shape, the axis direction nearest the fitted velocity, start, radius, speed."""
    v = videos.detach().float()
    b, _, f, h, w = v.shape
    dirs = direction_vectors()
    motion = (ft.velocity @ dirs.T).argmax(1)
    unit = dirs[motion]  # [B, 2]
    speed = (ft.velocity * unit).sum(1).clamp(min=0)
    t = torch.arange(f, dtype=torch.float32)
    # Start so that the mean position matches the measured one along the constrained path.
    mean_pos = torch.stack([ft.cx.mean(1), ft.cy.mean(1)], -1)
    start = mean_pos - unit * speed[:, None] * t.mean()
    radius = (ft.area.mean(1) / math.pi).sqrt()
    colour = palette_rgb()[ft.color]
    params = [start.clone(), speed.clone(), radius.clone()]

    def rerender(start: Tensor, speed: Tensor, radius: Tensor) -> Tensor:
        pos = start[:, None] + unit[:, None] * speed[:, None, None] * t[None, :, None]  # [B, F, 2]
        alpha = shape_alpha(ft.shape, pos[..., 0], pos[..., 1], radius, w)
        return composite(alpha, colour)

    if refine_steps > 0:
        # A few Adam steps on the continuous parameters (the renderer is differentiable in them).
        params = [p.requires_grad_(True) for p in params]
        opt = torch.optim.Adam(params, lr=0.05)
        with torch.enable_grad():
            for _ in range(refine_steps):
                opt.zero_grad()
                loss = ((rerender(*params) - v) ** 2).flatten(1).mean(1).sum()
                loss.backward()
                opt.step()
    with torch.no_grad():
        return ((rerender(*params) - v) ** 2).flatten(1).mean(1).sqrt()


@torch.no_grad()
def oracle(videos: Tensor, prompts: list[str], refine_steps: int = 0) -> dict[str, Tensor]:
    """Ground-truth scores for videos Tensor[B, 3, F, H, W] in [-1, 1] and their prompts.

    Returns Tensor[B] entries: ``vq``, ``mq``, ``ta`` in [0, 1] (higher is better), ``manifold`` (lower is
    better), ``correct`` (colour, shape and direction all match), ``color_ok``, ``shape_ok``,
    ``direction_ok`` and the sub-scores each of vq/mq/ta is the product of."""
    if videos.ndim != 5 or videos.shape[1] != 3:
        raise ValueError(f"videos must be Tensor[B, 3, F, H, W], got shape {tuple(videos.shape)}")
    if videos.shape[0] != len(prompts):
        raise ValueError(f"{videos.shape[0]} videos but {len(prompts)} prompts")
    ft = fit(videos)
    s = subscores(videos, prompts, ft)
    out = dict(s)
    out["vq"] = s["bg"] * s["edge"] * s["palette"]
    out["mq"] = s["velocity"] * s["size"] * s["constancy"] * s["flicker"]
    out["ta"] = s["color"] * s["shape"] * s["direction"] * s["presence"]
    out["correct"] = s["color_ok"] * s["shape_ok"] * s["direction_ok"]
    out["manifold"] = manifold_distance(videos, ft, refine_steps)
    return out
