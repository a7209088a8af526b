"""Train-inference consistency (``logp_gap``): the training forward's log-prob against the rollout's at the same
parameters, logged per update (train/optimize.py) and named by the liveness table above its threshold."""

from __future__ import annotations

import json

import pytest
import torch
from liveness_support import UPDATES, liveness_results
from tiny_run import tiny
from tiny_world import TinyModel, TinyReward

from grpo_bench.report.liveness import LOGP_GAP_WARN, findings
from grpo_bench.train.trainer import train


class TrainsAnotherPolicy(TinyModel):
    """Velocity + offset whenever autograd records (the training forward), as a bf16 or batch-shape mismatch would:
    the rollout and the loss then compute different means at the same parameters."""

    def __init__(self, offset: float) -> None:
        super().__init__(seed=0)
        self.offset = offset

    def velocity(self, x, sigma, cond):
        v = super().velocity(x, sigma, cond)
        return v + self.offset if torch.is_grad_enabled() else v


def _gaps(model, out) -> list[float]:
    cfg = tiny(method="flow_grpo", steps=4, minibatches=2, save_videos=False, kl_adaptive=False, kl_weight=0.1)
    train(cfg, out, model=model, reward=TinyReward())
    return [json.loads(x)["logp_gap"] for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_gap_is_zero_in_float32_and_measures_a_training_forward_that_differs(tmp_path):
    exact = _gaps(TinyModel(seed=0), tmp_path / "exact")
    assert exact == [0.0, 0.0]  # the same function at the same parameters, in float32
    # A training velocity moved by c everywhere moves the mean by d = b_i c, so the log-prob moves by
    # mean_e[d (x' - mu)] / var - d^2 / (2 var) = d mean(eps) / std - d^2 / (2 var). Over 6144 elements the first
    # part is ~1e-3; the second is closed form. flow_grpo at T = 4 trains steps 0, 1, 2 of every sample.
    from grpo_bench.core import schedule
    from grpo_bench.core.method import make_method
    from grpo_bench.core.sampling import StepTable

    table = StepTable.build(make_method("flow_grpo"), schedule.sigmas(4, 3.0))
    c = 1.0
    predicted = float(((table.b[:3] * c) ** 2 / (2 * table.std[:3] ** 2)).mean())  # 0.056
    shifted = _gaps(TrainsAnotherPolicy(c), tmp_path / "shifted")
    assert shifted == pytest.approx([predicted] * 2, rel=0.15)


def test_liveness_names_a_gap_above_its_threshold_and_not_below():
    ok = {"kl": "fixed", "metrics": {"ratio_mean": [1.0, 1.01] * 6, "clip_frac": [0.0, 0.2] * 6,
                                     "kl": [1e-4] * UPDATES, "logp_gap": [2e-7] * UPDATES}}
    bad = {"kl": "fixed", "config": {"clip_range": 1e-4},
           "metrics": {**ok["metrics"], "logp_gap": [2e-7] * (UPDATES - 1) + [3 * LOGP_GAP_WARN]}}
    found = findings(liveness_results({"flow_grpo ok": ok, "flow_grpo bad": bad}))
    assert found[found["group"] == "flow_grpo ok"].empty
    row = found[found["group"] == "flow_grpo bad"]
    assert list(row["mechanism"]) == ["train-inference consistency"]
    text = row["finding"].iloc[0]
    assert "up to 0.0003" in text and "2 of 24 updates" in text and "clip range 0.0001" in text


@pytest.mark.parametrize("gap", [float("nan"), LOGP_GAP_WARN])
def test_a_missing_or_threshold_gap_is_no_finding(gap):
    row = {"kl": "fixed", "metrics": {"ratio_mean": [1.0, 1.01] * 6, "clip_frac": [0.0, 0.2] * 6,
                                      "kl": [1e-4] * UPDATES, "logp_gap": [gap] * UPDATES}}
    assert findings(liveness_results({"flow_grpo r": row})).empty
