"""Shared fixtures: the tiny protocol-conforming model and reward (tests/_support/tiny_world.py), the tiny run
config and a tiny finished run (tests/_support/tiny_run.py), and a fresh accelerate state for the tests that change
the launch's precision; and how the tests share two cores under pytest-xdist (README's ``-n 2``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # An xdist worker inherits COLUMNS=80; the CLI's console (cli/terminal.py) would then wrap the one-line
    # messages the tests read. Unset, it prints to a pipe at its wide width, as in a serial run.
    os.environ.pop("COLUMNS", None)
from tiny_run import FINISHED, FinishedRun, run, tiny
from tiny_world import TinyModel, TinyReward

from grpo_bench.config.run import RunConfig


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker shares the cores with the other: one intra-op thread each, in the worker and in the
    processes its tests launch (two workers of two threads on two cores spend their time switching)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups (--dist loadgroup, pyproject addopts)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist a test module runs on one worker, so its module-scoped fixtures (a trained run, a launch)
    are built once; a test that names its own ``xdist_group`` keeps it ("launches": the tests that launch
    several processes run one at a time, so two cores hold one launch; each launch has a port of its own,
    tests/_support/launch_support.py)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


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


@pytest.fixture
def refused_network(monkeypatch, tmp_path) -> list:
    """Every host lookup and connection of the test is refused and recorded (the list returned): a loader that
    promises local files only must leave it empty. The lookup comes first, and fails at once on a machine without
    DNS, so both are caught rather than timed.

    huggingface_hub 2.x fetches a user-agent registry once a process (and once a day to a file under HF_HOME), so
    an earlier test or run would hide this test's fetch: both caches start empty here."""
    tried: list = []
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "AGENT_HARNESSES_PATH", str(tmp_path / "agent_harnesses.json"))
    try:
        from huggingface_hub.utils import _detect_agent
    except ImportError:  # a release before the registry
        pass
    else:
        monkeypatch.setattr(_detect_agent, "_registry", None)

    def refuse(*args, **kwargs):
        tried.append(args[:2])
        raise OSError("grpo-bench's tests open no network connection")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return tried
