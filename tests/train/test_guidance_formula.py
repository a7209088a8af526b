"""``guidance_formula`` reaches every place a run combines the guided halves: the rollout samples with it and the
loss recomputes with it (their log-probs agree at the rollout's parameters: ``logp_gap`` 0), and the evaluation
samples with it. Qwen-Image's formula against its pipeline: tests/models/test_image_models.py."""

from __future__ import annotations

import json

import pytest
from tiny_run import tiny
from tiny_world import TinyModel, TinyReward

from grpo_bench.config.run import RunConfig, from_dict
from grpo_bench.errors import UserError
from grpo_bench.train.trainer import train


def _run(tmp_path, formula: str) -> dict:
    """The first update's metrics line, with the base policy's evaluation (stored for the folder's other runs
    that evaluate the same base policy: train/base_eval.py)."""
    cfg = tiny(method="flow_grpo", steps=4, eval_every=1, minibatches=2, save_videos=False, kl_adaptive=False,
               kl_weight=0.1, guidance=3.0, guidance_formula=formula)
    out = tmp_path / formula
    train(cfg, out, model=TinyModel(seed=0), reward=TinyReward())
    return json.loads((out / "metrics.jsonl").read_text().splitlines()[0])


def test_rollout_loss_and_evaluation_use_the_runs_formula(tmp_path):
    plain, rescaled = _run(tmp_path, "cfg"), _run(tmp_path, "norm_rescaled")
    assert plain["logp_gap"] == 0.0 and rescaled["logp_gap"] == 0.0  # the loss combines as the rollout did
    assert abs(plain["reward"] - rescaled["reward"]) > 1e-4  # the rollouts sampled differently
    assert plain["eval_at"] == rescaled["eval_at"] == 0  # the base policy's evaluation, not shared between them
    assert abs(plain["eval_reward"] - rescaled["eval_reward"]) > 1e-4  # so did the evaluation


def test_an_unknown_formula_is_one_line():
    with pytest.raises(UserError, match="guidance_formula"):
        from_dict({"guidance_formula": "rescaled"})


def test_the_shared_base_evaluation_is_keyed_by_a_set_formula_only():
    """Runs of one folder share the update-0 evaluation by key (train/base_eval.py): another formula samples
    another evaluation; the default leaves the key as it was before the field existed."""
    from grpo_bench.train import base_eval

    def values(cfg: RunConfig) -> dict:
        return {k: getattr(cfg, k) for k in base_eval.READS}

    plain = values(RunConfig())
    assert base_eval.key(values(RunConfig(guidance_formula="norm_rescaled")), 1) != base_eval.key(plain, 1)
    assert "guidance_formula" not in base_eval.DEPENDS_ON  # so the default's key is the stored ones'
