"""Shared fixtures: a tiny protocol-conforming model and reward (tests/_support/tiny_world.py), and a fresh accelerate
state for the tests that change the launch's precision."""

from __future__ import annotations

import pytest
from tiny_world import TinyModel, TinyReward


@pytest.fixture
def tiny_model() -> TinyModel:
    return TinyModel(seed=0)


@pytest.fixture
def tiny_reward() -> TinyReward:
    return TinyReward()


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps one precision per process state: a test that trains in bf16 starts from a fresh state and
    leaves one, so that later tests start from 'no' again."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
