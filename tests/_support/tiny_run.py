"""A tiny run on the tiny test model (tiny_world.py): its config, one training call, and its metrics read back;
shared by the trainer's tests, the checkpoint-safety tests and conftest.py's fixtures."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tiny_world import TinyModel, TinyReward

from grpo_bench.config.run import RunConfig
from grpo_bench.train.trainer import TIMES, train


def tiny(**kw) -> RunConfig:
    base = dict(steps=3, prompts_per_update=2, group_size=2, updates=2, eval_every=10, eval_samples=2,
                diag_every=0, checkpoint_every=10, device="cpu", lr=1e-3, save_videos=True)
    base.update(kw)
    return RunConfig(**base)


def run(tmp_path, name="run", model=None, reward=None, **kw):
    return train(tiny(**kw), tmp_path / name, model=model or TinyModel(seed=0), reward=reward or TinyReward())


def lines(path) -> list[dict]:
    return [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]


def no_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMES} for r in rows]


# The session's finished run (conftest.py ``tiny_finished_run``): evaluated at its start and end, a gradient
# diagnostic at updates 0 and 2, the dual KL acting, so that its folder holds every file a finished run writes.
FINISHED = dict(updates=3, eval_every=2, diag_every=2, kl="dual", kl_weight=0.1)


@dataclass(frozen=True)
class FinishedRun:
    """A finished tiny run: its folder (shared by the session: read it, never write to it) and what train returned."""

    path: Path
    final: dict
