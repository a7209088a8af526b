"""Shared fixtures: a tiny protocol-conforming model and reward (tests/tiny_world.py)."""

from __future__ import annotations

import pytest
from tiny_world import TinyModel, TinyReward


@pytest.fixture
def tiny_model() -> TinyModel:
    return TinyModel(seed=0)


@pytest.fixture
def tiny_reward() -> TinyReward:
    return TinyReward()
