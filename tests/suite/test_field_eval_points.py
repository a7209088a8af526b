"""suites/field.yaml evaluates where the ledger's speed claims read quality: for each speed claim, the faster
as-shipped row's last update within the named fraction of the rival's training compute (claims/speed.py
``read_point``), from the trainer's own counters for the shipped recipes (pass counts depend on the config and the
method's hooks, not on the network: the tiny model counts them). Slow: four 90-update runs."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from tiny_world import TinyModel, TinyReward

from grpo_bench.config import metrics
from grpo_bench.report.claims import CLAIMS, Faster
from grpo_bench.report.claims.speed import read_point
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.tune import tuning_suite
from grpo_bench.train.trainer import train

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]


def _curve(cfg, folder) -> pd.DataFrame:
    """compute_training after each update (update 0: none yet), counted by a run of ``cfg`` on the tiny model."""
    import json

    cfg = dataclasses.replace(cfg, eval_samples=1, eval_every=1000, eval_at=[], diag_every=0, save_videos=False,
                              device="cpu", checkpoint_every=1000)
    train(cfg, folder, model=TinyModel(seed=0), reward=TinyReward())
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    return pd.DataFrame({"update": range(len(lines) + 1),
                         metrics.COMPUTE_TRAINING: [0, *(x[metrics.COMPUTE_TRAINING] for x in lines)]})


def test_the_field_evaluates_at_every_speed_claims_read_point(tmp_path):
    suite = load_suite("suites/field.yaml")
    shipped = {c.config.method: c.config for c in expand(tuning_suite(suite))
               if "max_train_steps" in c.labels and c.config.seed == suite.tune.seeds[0]}
    checks = [k for c in CLAIMS for k in c.checks if isinstance(k, Faster) and c.suite == "field"]
    assert len(checks) == 3
    curves = {m: _curve(shipped[m], tmp_path / m) for m in {x for k in checks
                                                            for x in (k.row["method"], k.versus["method"])}}
    needed = set()
    for check in checks:
        mine, rival = curves[check.row["method"]], curves[check.versus["method"]]
        finish_a, finish_b = mine[metrics.COMPUTE_TRAINING].iloc[-1], rival[metrics.COMPUTE_TRAINING].iloc[-1]
        u = read_point(mine, min(check.fraction * finish_b, finish_a))
        if u != mine["update"].iloc[-1]:  # a row read at its own end needs no eval of its own
            needed.add(u)
    assert needed and needed <= set(suite.budget["eval_at"])


def test_the_factor_suite_evaluates_where_its_equal_compute_reading_reads(tmp_path):
    """suites/factors.yaml's equal-compute reading (report/factors.py) reads every row at the compute where the
    cheapest step rule ends: the branching rule, one trained step a sample. The three-step rules' last update
    within it must be one of the suite's eval points, so that reading is measured there, not interpolated."""
    suite = load_suite("suites/factors.yaml")
    cells = {}
    for c in expand(tuning_suite(suite)):
        if c.config.seed == suite.tune.seeds[0] and c.config.lr == suite.tune.grid["lr"][0]:
            cells.setdefault(c.config.step_rule or "all", c.config)  # "all" is FlowGRPO's own rule: None
    assert set(cells) == {"all", "window", "sparse", "branch"}
    curves = {rule: _curve(cfg, tmp_path / rule) for rule, cfg in cells.items()}
    finish = {rule: float(c[metrics.COMPUTE_TRAINING].iloc[-1]) for rule, c in curves.items()}
    assert min(finish, key=finish.get) == "branch"
    reads = {read_point(curves[r], finish["branch"]) for r in cells if r != "branch"}
    assert reads <= set(suite.budget["eval_at"]), (reads, finish)
