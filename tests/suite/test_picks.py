"""A suite's ``pick`` block (report/picks.py): rows chosen by a declared rule from stored reports, the pre-registered
comparison of issue #46 item 4 (suites/factors_best.yaml)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from grpo_bench.errors import UserError
from grpo_bench.report.picks import best_row
from grpo_bench.report.suite_parts import load_suite_checked
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.results import COLUMNS, load_results, write_table
from grpo_bench.suite.tune import tuning_suite

ROOT = Path(__file__).resolve().parents[2]
FACTORS = load_suite(ROOT / "suites" / "factors.yaml")
DESIGN = FACTORS.design
# Known main effects (no noise): the best of the full factorial is (sparse, flow, ratio_norm), a point the
# 32-point fraction did not run (objective (2 + 0) mod 3 = ratio_norm is dropped there).
EFFECT = {"step_rule": {"sparse": 0.20, "branch": 0.10}, "kernel": {"flow": 0.10, "sage": 0.05},
          "objective": {"ratio_norm": 0.05, "kl_mask": 0.02}}


def _frame(suite: str, cells: list[tuple[dict, dict, int, float]], report: dict | None = None) -> pd.DataFrame:
    """A results table holding, per (labels, config, seed, learning) cell, its cell row and its held-out oracle
    eval at update 0 (0.5 each) and at update 90 (each of VQ, MQ, TA up by learning / 3: Setting A weighs 1, 1, 1)."""
    # the suite row as the aggregator writes it (suite/aggregate.py): the fixed columns of no cell, seed 0
    # (suite/rows.py EMPTY_CONFIG), and its record as JSON with sorted keys, which reorders a design's factors
    rows = [{"suite": suite, "kind": "suite", "seed": 0,
             "text": json.dumps({"name": suite, "report": report or {}}, sort_keys=True)}]
    for i, (labels, config, seed, gain) in enumerate(cells):
        cell = f"c{i:04d}"
        base = {"suite": suite, "cell": cell, "group": json.dumps(labels, sort_keys=True), "setting": "A",
                "method": config["method"], "kl": "fixed", "equalizer": False, "seed": seed}
        rows.append({**base, "kind": "cell", "metric": "wall_time", "value": 1.0,
                     "text": json.dumps({"labels": {**labels, "seed": seed}, "config": {**config, "seed": seed},
                                         "status": "done"})})
        for update, value in ((0, 0.5), (90, 0.5 + gain / 3)):
            rows += [{**base, "kind": "update", "update": update, "metric": f"eval_oracle_{d}", "value": value}
                     for d in ("vq", "mq", "ta")]
    frame = pd.DataFrame(rows)
    for column, kind in COLUMNS.items():
        frame[column] = (frame[column] if column in frame else pd.Series([None] * len(frame))).astype(kind)
    return frame


def factors_source(seeds=(1000, 1001, 1002), later=(1003,)) -> pd.DataFrame:
    """The design's cells on ``seeds`` with the known effects, and on ``later`` seeds (a later look the pick does
    not read) with the effects reversed five-fold, so a pick reading them would choose another point."""
    cells = []
    for point in DESIGN.points:
        labels = {"method": DESIGN.method}
        for factor, level in zip(DESIGN.factors, point):
            labels.update(DESIGN.factors[factor][level])
        gain = sum(EFFECT[f].get(level, 0.0) for f, level in zip(DESIGN.factors, point))
        config = {**labels, "reward": "world_oracle", "max_train_steps": 3}
        cells += [(labels, config, s, gain) for s in seeds] + [(labels, config, s, -5 * gain) for s in later]
    return _frame("factors", cells, {"design": DESIGN.to_dict()})


def field_source(seeds=(1000, 1001, 1002, 1003, 1004, 1005)) -> pd.DataFrame:
    """Three fair rows and one as-shipped row that learns most (so ``where`` must exclude it)."""
    rows = [("flow_grpo", 3, 0.10), ("flow_dppo", 3, 0.40), ("mix_grpo", 3, 0.30), ("mix_grpo", None, 0.50)]
    cells = [({"method": m, "reward": "world_oracle", **({} if t == 3 else {"max_train_steps": None})},
              {"method": m, "reward": "world_oracle", "max_train_steps": t}, s, g + 0.01 * (s % 2))
             for m, t, g in rows for s in seeds]
    return _frame("field", cells)


def layout(tmp_path: Path, suite: str = "factors_best", edit=None, sources=None) -> Path:
    """tmp/suites/<suite>.yaml (optionally edited) beside tmp/reports/{factors,field}/results.parquet."""
    (tmp_path / "suites").mkdir()
    data = yaml.safe_load((ROOT / "suites" / f"{suite}.yaml").read_text())
    if edit:
        edit(data)
    path = tmp_path / "suites" / f"{suite}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for name, frame in (sources if sources is not None else {"factors": factors_source(),
                                                             "field": field_source()}).items():
        (tmp_path / "reports" / name).mkdir(parents=True)
        write_table(tmp_path / "reports" / name / "results.parquet", frame)
    return path


def test_the_pre_registered_suite_picks_the_models_best_point_and_the_best_fair_row(tmp_path):
    suite = load_suite_checked(layout(tmp_path))
    candidate, comparator = suite.union
    assert candidate == {"method": ["flow_grpo"], "step_rule": ["sparse"], "steps.n": [3], "kernel": ["flow"],
                         "noise_level": [0.7], "objective": ["ratio_norm"], "clip_range": [4e-6]}
    assert comparator == {"method": ["flow_dppo"]}  # the as-shipped mix_grpo row learns more but is not fair
    assert suite.report.baseline == {"method": "flow_dppo"}
    assert sorted(c.config.seed for c in expand(suite)) == [3000, 3000, 3001, 3001, 3002, 3002]


def test_both_rows_get_the_factor_suites_tuning_and_the_candidate_reuses_its_tuning_cells(tmp_path):
    """A candidate the fraction ran (window x cps x kl_mask learns most here): its tuning cells are factors_tune's."""
    levels = DESIGN.factors
    ran = {"method": "flow_grpo", **levels["step_rule"]["window"], **levels["kernel"]["cps"],
           **levels["objective"]["kl_mask"]}
    other = {**ran, **levels["step_rule"]["all"]}
    cells = [(labels, labels, s, gain) for labels, gain in ((ran, 0.3), (other, 0.0)) for s in (1000, 1001)]
    sources = {"factors": _frame("factors", cells, {"design": DESIGN.to_dict()}), "field": field_source()}
    suite = load_suite_checked(layout(tmp_path, edit=_set(["pick", 0, "seeds"], [1000, 1001]), sources=sources))
    assert suite.union[0] == {k: [v] for k, v in ran.items()}
    tuning = expand(tuning_suite(suite))
    assert len(tuning) == 2 * 3 * 2  # two rows x the factor suite's 3 lrs x its 2 tuning seeds
    factors_tuning = {c.id for c in expand(tuning_suite(FACTORS))}
    candidate = [c for c in tuning if c.config.method == "flow_grpo"]
    assert len(candidate) == 6 and {c.id for c in candidate} <= factors_tuning


def test_the_best_row_of_the_stored_field_report_is_the_rendered_tables_best_fair_oracle_row():
    """Against an independent computation: the rendered Table 2 (tables/table2.csv) of the same cells."""
    table = pd.read_csv(ROOT / "reports" / "field" / "tables" / "table2.csv")
    fair = table[table["setting"] == "A, reward=world_oracle, max_train_steps=3"]
    expected = fair.loc[fair["Oracle_mean"].idxmax(), "group"].split()[0]
    df = load_results(ROOT / "reports" / "field" / "results.parquet")
    got = best_row(df, {"where": {"reward": "world_oracle", "max_train_steps": 3}, "take": ["method"]}, "")
    assert got == {"method": expected}


def _set(path: list, value):
    def edit(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


@pytest.mark.parametrize("edit, says", [
    (_set(["pick", 0, "from"], "../factors"), "pick[0].from: name must be a folder-safe string"),
    (_set(["pick", 0, "from"], "nowhere"), "pick[0].from: no stored results at"),
    (_set(["pick", 0, "rule"], "best_guess"), "unknown pick rule 'best_guess'"),
    (_set(["pick", 0, "seeds"], [1000, 1007]), "holds no cells on seeds [1007]"),
    (_set(["pick", 0, "colour"], 1), "unknown pick[0] key 'colour'"),
    (_set(["pick", 1, "take"], []), "pick[1].take must name the labels"),
    (_set(["pick", 1, "take"], ["colour"]), "unknown pick.take key (a run config key) 'colour'"),
    (_set(["pick", 1, "where"], {"reward": "world_judge"}), "no row of the source has {'reward': 'world_judge'}"),
    (_set(["pick", 0, "baseline"], True), "two picks are the baseline"),
    (_set(["pick", 1, "name"], "candidate"), "'candidate' names two picks"),
    (_set(["report", "baseline"], {"method": "cps"}), "both name the baseline"),
    (_set(["seeds"], [990]), "seeds [1000, 1001] were run by the pick's source 'factors'"),  # added looks
])
def test_a_bad_pick_is_one_line_before_any_cell(edit, says, tmp_path):
    with pytest.raises(UserError) as err:
        load_suite_checked(layout(tmp_path, edit=edit))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_source_without_a_design_and_a_stored_design_that_does_not_parse_are_refused(tmp_path):
    bad = DESIGN.to_dict()
    bad["estimates"] = [*bad["estimates"], "kernel:objective"]  # aliased in the fraction: refused on read-back
    aliased = "stored design: design: 'kernel:objective' is listed under estimates and not_estimated"
    for report, says in (({}, "holds no factorial design"), ({"design": bad}, aliased)):
        sources = {"factors": _frame("factors", [({"method": "flow_grpo"}, {"method": "flow_grpo"}, 1000, 0.1)],
                                     report), "field": field_source()}
        folder = tmp_path / str(len(says))
        folder.mkdir()
        with pytest.raises(UserError) as err:
            load_suite_checked(layout(folder, edit=_set(["pick", 0, "seeds"], [1000]), sources=sources))
        assert says in str(err.value)


def test_the_shipped_suite_waits_for_its_source_in_one_line(tmp_path):
    (tmp_path / "suites").mkdir()
    shutil.copy(ROOT / "suites" / "factors_best.yaml", tmp_path / "suites")
    path = tmp_path / "suites" / "factors_best.yaml"
    proc = subprocess.run([sys.executable, "-m", "grpo_bench.cli", "plan", str(path)], capture_output=True, text=True)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert "pick[0].from: no stored results at" in err and str(tmp_path / "reports" / "factors") in err
    with pytest.raises(UserError, match="pick reads stored reports"):  # the suite layer alone cannot resolve it
        load_suite(tmp_path / "suites" / "factors_best.yaml")
