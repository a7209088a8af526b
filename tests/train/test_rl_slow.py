"""RL must work, measured on the shipped world (opt-in: ``pytest -m slow``; ~30-60 min on 2 cores).

1. sage_grpo, kl dual, Setting B, 3 seeds × 200 updates (the RunConfig defaults otherwise): the
   judge reward rises (95% CI of the gain above 0), and on the held-out eval prompts the oracle's
   prompt accuracy rises and the videos move closer to the data manifold.
2. kl none with the raised learning rate HACK_LR: the judge reward rises while the eval oracle
   falls (reward hacking), which is what the trust regions exist to prevent.

The same measurement as a script, with a live summary: ``benchmarks/rl_gain.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grpo_bench.config.run import RunConfig
from grpo_bench.train.trainer import train

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from rl_gain import summary  # noqa: E402

HACK_LR = 1e-4
"""kl none at this learning rate hacks the judge: measured with the step-250 base and a synthetic-data
judge, by update 50 the eval judge reward rose by +0.8 z while oracle correct fell .28 -> .22,
oracle TA .46 -> .22 and the manifold distance grew .32 -> .37."""

pytestmark = pytest.mark.slow


def _runs(root: Path, seeds, **kw) -> dict:
    for seed in seeds:
        train(RunConfig(seed=seed, threads=1, **kw), root / f"seed{seed}")
    return summary(root)["mean_ci95"]


def test_sage_dual_setting_b_improves_the_judge_and_the_oracle(tmp_path):
    s = _runs(tmp_path / "dual", (0, 1, 2), method="sage_grpo", kl="dual", setting="B")
    gain = s["train_reward_gain"]
    assert gain["ci95"][0] > 0, gain
    assert s["eval_reward_delta"]["mean"] > 0
    assert s["eval_correct_delta"]["mean"] > 0 and s["eval_manifold_delta"]["mean"] < 0, s


def test_no_kl_at_high_lr_hacks_the_judge(tmp_path):
    s = _runs(tmp_path / "hack", (0,), method="sage_grpo", kl="none", setting="B", lr=HACK_LR)
    assert s["eval_reward_delta"]["mean"] > 0  # the judge says better
    worse = (
        s["eval_correct_delta"]["mean"] < 0,
        s["eval_oracle_ta_delta"]["mean"] < 0,
        s["eval_manifold_delta"]["mean"] > 0,
    )
    assert sum(worse) >= 2, s  # the oracle says worse
