"""SAGE-GRPO's KL schedule as its paper states it (core/kl_weight.py ``feedback="ziegler"``): a linear warm-up
to beta_max, then Ziegler et al.'s controller, checked against the recursion computed here by hand."""

from __future__ import annotations

import pytest

from grpo_bench.core.kl_weight import AdaptiveKLWeight


def test_warm_up_then_the_clipped_multiplicative_controller():
    w = AdaptiveKLWeight(1e-7, 1e-5, warmup=4, target=0.01, window=2, feedback="ziegler", horizon=10.0)
    seen = [w.value]
    kls = [0.0, 0.0, 0.0, 0.0, 0.05, 0.05, 0.011, 0.0]
    for kl in kls:
        w.update(kl)
        seen.append(w.value)
    # warm-up: 1e-7 + (1e-5 - 1e-7) * u / 4, u = 0..4 (the last is exactly beta_max)
    for u in range(5):
        assert seen[u] == pytest.approx(1e-7 + (1e-5 - 1e-7) * u / 4)
    expected = 1e-5
    history = [0.0, 0.0, 0.0, 0.0]
    for kl in kls[4:]:
        history.append(kl)
        kbar = sum(history[-2:]) / 2
        expected = max(expected * (1 + min(max(kbar / 0.01 - 1, -0.2), 0.2) / 10), 1e-7)
    assert seen[-1] == pytest.approx(expected)
    assert seen[5] == pytest.approx(1e-5 * 1.02)  # kbar 0.025: +150% clipped to +20%, over a horizon of 10


def test_the_floor_holds_and_state_round_trips():
    w = AdaptiveKLWeight(1e-3, 1e-1, warmup=0, target=1.0, window=1, feedback="ziegler", horizon=1.0)
    for _ in range(60):
        w.update(0.0)  # KL far below target: -20% a step until the floor
    assert w.value == pytest.approx(1e-3)
    other = AdaptiveKLWeight(1e-3, 1e-1, warmup=0, target=1.0, window=1, feedback="ziegler", horizon=1.0)
    other.load_state_dict(w.state_dict())
    w.update(2.0)
    other.update(2.0)
    assert other.value == w.value == pytest.approx(1.2e-3)
