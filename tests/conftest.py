"""Shared fixtures: the tiny protocol-conforming model and reward (tests/_support/tiny_world.py), the tiny run
config and a tiny finished run (tests/_support/tiny_run.py), and a fresh accelerate state for the tests that change
the launch's precision."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tiny_run import FINISHED, FinishedRun, run, tiny
from tiny_world import TinyModel, TinyReward

from grpo_bench.config.run import RunConfig


@pytest.fixture
def tiny_model() -> TinyModel:
    return TinyModel(seed=0)


@pytest.fixture
def tiny_reward() -> TinyReward:
    return TinyReward()


@pytest.fixture
def tiny_config() -> Callable[..., RunConfig]:
    """The tiny run config (3 steps, 2 prompts x 2, 2 updates, CPU) as a factory: ``tiny_config(kl="dual")``."""
    return tiny


@pytest.fixture(scope="session")
def tiny_finished_run(tmp_path_factory) -> FinishedRun:
    """One tiny run (tiny_run.FINISHED) trained once per session; tests read its folder and never write to it."""
    folder = tmp_path_factory.mktemp("tiny_finished")
    return FinishedRun(folder / "run", run(folder, **FINISHED))


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps one precision per process state: a test that trains in bf16 starts from a fresh state and
    leaves one, so that later tests start from 'no' again."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
