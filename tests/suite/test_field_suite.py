"""suites/field.yaml: the ten methods tuned alike (equal grids), two readings that the ledger's speed claims can
tell apart, test seeds disjoint from tuning seeds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from grpo_bench.report.claims import CLAIMS
from grpo_bench.report.claims.speed import Faster
from grpo_bench.report.claims.suite import matches
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.tune import tuned_methods, tuned_rows, tuning_suite, with_chosen

FIELD = Path(__file__).resolve().parents[2] / "suites" / "field.yaml"


def test_every_method_gets_the_same_tuning_grid_and_both_readings():
    suite = load_suite(FIELD)
    methods = tuned_methods(suite.grid, suite.union, suite.base)
    assert len(methods) == 10
    tuning = expand(tuning_suite(suite))
    rows = tuned_rows(suite)
    assert len(rows) == 20  # every method in both readings, each tuned apart
    assert set(Counter(c.config.method for c in tuning).values()) == {36}  # 2 readings x 6 lrs x 3 tuning seeds
    assert not {c.config.seed for c in tuning} & set(suite.seeds)
    # the four main methods' fair tuning cells are the main table's (restorable from its stored grid)
    main = {c.id for c in expand(tuning_suite(load_suite(FIELD.parent / "main_table.yaml")))}
    shared = {c.id for c in tuning if c.config.method in ("dance_grpo", "flow_grpo", "cps", "sage_grpo")
              and c.config.max_train_steps == 3}
    assert len(shared) == 72 and shared <= main
    cells = expand(with_chosen(suite, {name: {"lr": 1e-4} for name, _, _ in rows}))
    readings = Counter((c.config.method, c.config.max_train_steps) for c in cells)
    assert set(readings) == {(m, r) for m in methods for r in (3, None)}  # fair block and as shipped, every method


def test_each_speed_claim_selects_exactly_one_row_of_each_family():
    suite = load_suite(FIELD)
    cells = expand(with_chosen(suite, {name: {"lr": 1e-4} for name, _, _ in tuned_rows(suite)}))
    speed = [check for claim in CLAIMS for check in claim.checks if isinstance(check, Faster)]
    assert len(speed) == 3
    for check in speed:
        for reward in ("world_oracle", "world_judge"):
            family = [c for c in cells if c.config.reward == reward]
            for where in (check.row, check.versus):
                groups = {c.group for c in family if matches(c.config.to_dict(), where)}
                assert len(groups) == 1, (where, groups)
