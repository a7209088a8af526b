"""Optimizer steps as a recipe takes them (docs/design.md §4): one per minibatch (the official codes'
accumulation: tests/train/test_recipe_schedule.py), or one per (sample, trained step) backward
(``step_every: micro_step``), with
the KL warm-up and feedback counted in updates or in optimizer steps (``kl_schedule_unit``)."""

from __future__ import annotations

import json

import pytest

from grpo_bench.config.run import from_dict
from grpo_bench.train.trainer import train

BASE = dict(method="sage_grpo", kl="dual", updates=2, prompts_per_update=1, group_size=4, max_train_steps=3,
            reward="world_oracle", eval_every=100, eval_samples=1, diag_every=0, checkpoint_every=100,
            save_videos=False, device="cpu", threads=1, kl_adaptive=True, kl_beta_min=1e-3, kl_beta_max=1e-1,
            kl_warmup=100, anchor_every=5)


def _rows(tmp_path, **kw):
    out = tmp_path / "run"
    train(from_dict({**BASE, **kw}), out)
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("micro_batch, minibatches", [(1, 1), (2, 1), (1, 2)])
def test_micro_step_schedule_steps_once_per_sample_and_trained_step(tmp_path, micro_batch, minibatches):
    rows = _rows(tmp_path, step_every="micro_step", micro_batch=micro_batch, minibatches=minibatches)
    per_update = 4 * 3  # 4 rollouts x 3 trained steps, whatever micro_batch (memory only; minibatches: the order)
    assert [r["optimizer_steps"] for r in rows] == [per_update, 2 * per_update]
    assert rows[-1]["anchor_copies"] == 2 * per_update // 5  # anchor_every counts optimizer steps


def test_minibatch_schedule_is_unchanged(tmp_path):
    rows = _rows(tmp_path, minibatches=2, micro_batch=1)
    assert [r["optimizer_steps"] for r in rows] == [2, 4]
    assert rows[0]["kl_weight"] == 1e-3 and rows[1]["kl_weight"] == pytest.approx(1e-3 + 0.099 / 100)


def test_kl_warmup_counts_optimizer_steps_when_the_recipe_says_so(tmp_path):
    rows = _rows(tmp_path, step_every="micro_step", micro_batch=1, kl_schedule_unit="optimizer_step")
    # 12 optimizer steps per update; step s uses beta_min + (beta_max - beta_min) * s / warmup, and the
    # logged weight is the mean over the update's steps: s = 0..11, then 12..23
    for u, row in enumerate(rows):
        mean_s = 12 * u + 5.5
        assert row["kl_weight"] == pytest.approx(1e-3 + 0.099 * mean_s / 100, rel=1e-12)
