"""The exact oracle and the corruptions (grpo_bench/world/oracle.py, corrupt.py)."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_bench.errors import UserError
from grpo_bench.train.evaluation import diversity
from grpo_bench.world import CORRUPTIONS, corrupt, oracle, prompts, render, sample_params
from grpo_bench.world.generator import palette_rgb
from grpo_bench.world.oracle import fit

ALL = prompts("all")
SEEDS = range(6)


@pytest.fixture(scope="module", params=[16, 24])
def rendered(request):
    size = request.param
    videos = torch.cat([render(ALL, s, size=size) for s in SEEDS])
    return size, videos, ALL * len(SEEDS), oracle(videos, ALL * len(SEEDS))


def test_rendered_videos_score_high(rendered):
    _, _, _, o = rendered
    for key in ("vq", "mq", "ta"):
        assert o[key].min() >= 0.95, (key, float(o[key].min()))
        assert o[key].max() <= 1.0
    assert o["correct"].mean() >= 0.99
    assert o["manifold"].max() < 0.08  # RMS in [-1, 1] units: the re-render is near exact


def test_round_trip_of_generator_attributes(rendered):
    """Every prompt and seed: colour, shape, direction, centroid, radius and speed come back."""
    size, videos, texts, o = rendered
    assert o["color_ok"].all() and o["shape_ok"].all() and o["direction_ok"].all()
    p = [sample_params(ALL, s, size=size) for s in SEEDS]
    ft = fit(videos)
    cx0 = torch.cat([q.cx for q in p]).float()
    cy0 = torch.cat([q.cy for q in p]).float()
    radius = torch.cat([q.radius for q in p]).float()
    speed = torch.cat([q.speed for q in p]).float()
    assert (ft.start[:, 0] - cx0).abs().max() < 0.15  # pixels
    assert (ft.start[:, 1] - cy0).abs().max() < 0.15
    assert ((ft.area.mean(1) / math.pi).sqrt() - radius).abs().max() < 0.1
    assert (ft.velocity.norm(dim=1) - speed).abs().max() < 0.05
    assert (ft.rgb - palette_rgb()[torch.cat([q.color for q in p])]).abs().max() < 1e-3


@pytest.mark.parametrize("size", [16, 24])
def test_gaussian_noise_scores_low(size):
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(96, 3, 8, size, size, generator=g).clamp(-1, 1)
    o = oracle(noise, ALL * 2)
    for key in ("vq", "mq", "ta"):
        assert o[key].max() <= 0.2, (key, float(o[key].max()))
    assert o["manifold"].min() > 0.5


# Which score each corruption is meant to hurt (it must fall by at least DROP at full strength).
TARGETS = {"blur": "vq", "jitter": "mq", "color_shift": "ta", "wrong_direction": "ta", "speckle": "vq"}
DROP = 0.3


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_scores_fall_monotonically_with_each_corruption(name):
    base = torch.cat([render(ALL, s, size=16) for s in range(2)])
    texts = ALL * 2
    means = []
    for strength in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        o = oracle(corrupt(name, base, strength, seed=3), texts)
        means.append({k: float(o[k].mean()) for k in ("vq", "mq", "ta")})
    for key in ("vq", "mq", "ta"):
        series = [m[key] for m in means]
        assert all(b <= a + 5e-3 for a, b in zip(series, series[1:])), (name, key, series)
    target = TARGETS[name]
    assert means[0][target] - means[-1][target] >= DROP, (name, target, means)


def test_corruption_registry_and_identity():
    assert set(CORRUPTIONS.names()) == set(TARGETS)
    v = render(ALL[:8], 0, size=16)
    for name in CORRUPTIONS.names():
        out = corrupt(name, v, 0.0, seed=1)
        assert out.shape == v.shape
        assert torch.allclose(out, v, atol=2e-3), name  # wrong_direction re-renders from the fit
    with pytest.raises(UserError, match="strength"):
        corrupt("blur", v, 1.5)
    with pytest.raises(UserError, match="allowed"):
        corrupt("smudge", v, 0.5)


def test_color_shift_moves_colour_linearly_off_the_palette():
    """The shift target is equidistant (0.67135, computed independently) from all four palette colours,
    so the fitted colour's distance to the nearest palette colour is exactly strength * 0.67135."""
    v = render(ALL, 0, size=24)
    for s in (0.25, 0.5, 1.0):
        ft = fit(corrupt("color_shift", v, s))
        dist = torch.cdist(ft.rgb, palette_rgb()).min(1).values
        assert torch.allclose(dist, torch.full_like(dist, s * 0.67135), atol=2e-3), s


def test_wrong_direction_at_full_strength_reverses_motion():
    v = render(ALL, 1, size=24)
    o = oracle(corrupt("wrong_direction", v, 1.0), ALL)
    assert o["direction_ok"].sum() == 0
    assert o["color_ok"].all() and o["shape_ok"].all()
    assert o["vq"].min() > 0.9 and o["mq"].min() > 0.9


def test_diversity_closed_form():
    v = render(ALL[:4], 0, size=16)
    same = v[:1].repeat(4, 1, 1, 1, 1)
    assert torch.allclose(diversity(same, 4), torch.zeros(1), atol=1e-6)
    pair = torch.stack([v[0], v[1]])
    rms = ((v[0] - v[1]) ** 2).mean().sqrt()
    assert torch.allclose(diversity(pair, 2), rms.reshape(1), atol=1e-5)
    assert diversity(v, 2).shape == (2,)
    with pytest.raises(ValueError):
        diversity(v, 3)


def test_bad_input():
    v = render(ALL[:2], 0, size=16)
    with pytest.raises(UserError, match="colours red"):
        oracle(v, ["a purple circle moving left", ALL[1]])
    with pytest.raises(ValueError):
        oracle(v, ALL[:3])
