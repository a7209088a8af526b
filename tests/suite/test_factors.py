"""The factorial suite (suite/design.py, suites/factors.yaml) and its effects (report/factors.py): a design that
cannot estimate a claimed effect is refused in one line before any cell, and the fit recovers known effects."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from grpo_bench.cli import entry
from grpo_bench.report.factors import fit_effects, predict_points
from grpo_bench.report.stats import mean_ci
from grpo_bench.suite.parse import load_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE = yaml.safe_load((ROOT / "suites" / "factors.yaml").read_text())
DESIGN = SUITE["design"]
LEVELS = {f: list(v) for f, v in DESIGN["factors"].items()}


def test_the_factors_suite_expands_its_declared_points():
    suite = load_suite(ROOT / "suites" / "factors.yaml")
    assert len(suite.design.points) == 32 and suite.report.design["estimates"] == DESIGN["estimates"]
    steps = [next(lv for lv, vals in DESIGN["factors"]["step_rule"].items() if vals["step_rule"] == g["step_rule"][0])
             for g in suite.union]
    assert steps.count("branch") == 8 and all(g["method"] == ["flow_grpo"] for g in suite.union)
    assert all(g["shared_noise"] == [True] for g in suite.union if g["step_rule"] == ["branch"])


def _run(tmp_path, monkeypatch, capsys, design_edit):
    data = yaml.safe_load((ROOT / "suites" / "factors.yaml").read_text())
    design_edit(data["design"])
    path = tmp_path / "factors.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setattr(sys, "argv", ["grpo-bench", "run", str(path), "--out", str(tmp_path / "runs"), "--jobs", "1"])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("config.yaml"))
    return err


def _claim_kernel_objective(d):
    d["estimates"].append("kernel:objective")
    d["not_estimated"].remove("kernel:objective")


def _unclaim_step_kernel(d):
    d["estimates"].remove("step_rule:kernel")
    d["not_estimated"].append("step_rule:kernel")


def _kernel_twice(d):
    d["factors"]["objective"]["clipped"]["kernel"] = "flow"


@pytest.mark.parametrize("edit, says", [
    (_claim_kernel_objective, "claims 'kernel:objective', which the 32 design points cannot separate"),
    # without step_rule:kernel in the model, kernel:objective is no longer aliased: the suite's statement is wrong
    (_unclaim_step_kernel, "not_estimated lists 'kernel:objective', which the design does estimate"),
    (_kernel_twice, "config key 'kernel' is set by factor 'kernel' too; a factor is named once"),
    (lambda d: d["points"].append(["all", "flow", "kl_mask"]), "repeats the point ['all', 'flow', 'kl_mask']"),
    (lambda d: d["factors"]["step_rule"]["window"].update({"steps.size": 11}), "does not fit in the window range"),
])
def test_a_bad_design_is_one_line_before_any_cell(edit, says, tmp_path, monkeypatch, capsys):
    assert says in _run(tmp_path, monkeypatch, capsys, edit)


def _synthetic(noise: float, seeds=(0, 1, 2, 3)) -> tuple[pd.DataFrame, dict, dict]:
    """y = mu + a_i + b_j + c_k + (ab)_ij + (ac)_ik + s_seed + noise, every effect summing to zero."""
    rng = np.random.default_rng(0)

    def centred(*shape):
        x = rng.normal(size=shape)
        for axis in range(len(shape)):
            x = x - x.mean(axis=axis, keepdims=True)
        return x

    a, b, c = centred(4), centred(4), centred(3)
    ab, ac = centred(4, 4), centred(4, 3)
    rows = []
    for s in seeds:
        shift = rng.normal()
        for st, ke, ob in DESIGN["points"]:
            i, j, k = LEVELS["step_rule"].index(st), LEVELS["kernel"].index(ke), LEVELS["objective"].index(ob)
            y = 0.5 + a[i] + b[j] + c[k] + ab[i, j] + ac[i, k] + shift + noise * rng.normal()
            rows.append({"step_rule": st, "kernel": ke, "objective": ob, "seed": s, "y": y})
    return pd.DataFrame(rows), {"step_rule": a, "kernel": b, "objective": c}, {"ab": ab, "ac": ac}


def test_the_fit_recovers_known_effects_exactly_without_noise():
    frame, mains, inter = _synthetic(noise=0.0)
    got = fit_effects(frame, LEVELS, DESIGN["estimates"])
    for factor, truth in mains.items():
        part = got[got["effect"] == factor]
        np.testing.assert_allclose(part["estimate"], truth, atol=1e-9)
    part = got[got["effect"] == "step_rule:kernel"]
    np.testing.assert_allclose(part["estimate"], inter["ab"].flatten(), atol=1e-9)
    part = got[got["effect"] == "step_rule:objective"]
    np.testing.assert_allclose(part["estimate"], inter["ac"].flatten(), atol=1e-9)
    assert (got["high"] - got["low"]).abs().max() < 1e-6  # the seed shift is absorbed: nothing left to vary


def test_the_seed_clustered_interval_is_the_t_interval_over_seeds_of_each_seeds_fit():
    frame, mains, _ = _synthetic(noise=0.3)
    got = fit_effects(frame, LEVELS, DESIGN["estimates"])
    per_seed = [fit_effects(part, LEVELS, DESIGN["estimates"])["estimate"]  # one seed: its own fit
                for _, part in frame.groupby("seed")]
    for row, values in zip(got.itertuples(), zip(*per_seed)):
        mean, half, n = mean_ci(list(values))
        assert n == 4 and abs(row.estimate - mean) < 1e-9 and abs((row.high - row.low) / 2 - half) < 1e-9
    kernel = got[got["effect"] == "kernel"]
    assert ((kernel["low"] <= mains["kernel"] + 1.0) & (kernel["high"] >= mains["kernel"] - 1.0)).all()


def test_predictions_cover_the_full_factorial_and_find_the_true_best_without_noise():
    """With no noise and no unestimated interaction in the truth, the model predicts all 48 points exactly (up to
    the level every point shares), the 16 the fraction did not run included, so its best is the true best."""
    frame, mains, inter = _synthetic(noise=0.0)
    pred = predict_points(frame, LEVELS, DESIGN["estimates"])
    assert len(pred) == 48 and int(pred["ran"].sum()) == 32
    a, b, c = mains["step_rule"], mains["kernel"], mains["objective"]
    for r in pred.itertuples():
        i, j, k = LEVELS["step_rule"].index(r.step_rule), LEVELS["kernel"].index(r.kernel), \
            LEVELS["objective"].index(r.objective)
        truth = a[i] + b[j] + c[k] + inter["ab"][i, j] + inter["ac"][i, k]
        assert r.estimate - float(pred["estimate"].mean()) == pytest.approx(truth, abs=1e-9)
    assert list(pred["estimate"]) == sorted(pred["estimate"], reverse=True)
    width = pred["high"] - pred["low"]  # only the seed's shift of the whole level varies: one width for every point
    assert width.min() > 0.1 and width.max() - width.min() < 1e-6


def test_a_predictions_interval_is_the_t_interval_over_seeds_of_each_seeds_prediction():
    frame, _, _ = _synthetic(noise=0.3)
    key = ["step_rule", "kernel", "objective"]
    pred = predict_points(frame, LEVELS, DESIGN["estimates"]).set_index(key)
    per_seed = [predict_points(part, LEVELS, DESIGN["estimates"]).set_index(key)["estimate"]
                for _, part in frame.groupby("seed")]
    for point in [("branch", "dance", "clipped"), ("all", "flow", "kl_mask")]:  # one not run, one run
        mean, half, n = mean_ci([float(p.loc[point]) for p in per_seed])
        row = pred.loc[point]
        assert n == 4 and abs(row.estimate - mean) < 1e-9 and abs((row.high - row.low) / 2 - half) < 1e-9
    assert not pred.loc[("all", "flow", "clipped")].ran and pred.loc[("all", "flow", "kl_mask")].ran


def test_the_predictions_table_shows_the_best_first_and_stores_every_point(tmp_path, monkeypatch):
    from grpo_bench.report import factors
    from grpo_bench.report.parts import Context

    frame, _, _ = _synthetic(noise=0.0)
    monkeypatch.setattr(factors, "design_frame", lambda df, design: frame)
    (section,) = factors.factor_predictions_table(Context(df=pd.DataFrame(), out=tmp_path, spec={"design": DESIGN}))
    best = predict_points(frame, LEVELS, DESIGN["estimates"]).iloc[0]
    body = section.body.splitlines()
    rows = [line for line in body if line.startswith("| ") and "Predicted" not in line and "---" not in line]
    assert len(rows) == 8 and rows[0].startswith(f"| {best.step_rule} | {best.kernel} | {best.objective} |")
    assert len(pd.read_csv(tmp_path / "tables" / "factor_predictions.csv")) == 48
    assert "kernel:objective" in section.how  # says which interactions a prediction takes as zero


PASSES = {"branch": 208, "other": 304}
"""Training passes an update in the factor suite's block (factors_tune's counters, bb7528e): the branching rule
trains one step a sample, the others three."""


def _results(gains: dict[tuple, float], seeds=(1000, 1001), eval_at=(61,), config=None, training=None) -> pd.DataFrame:
    """A results table of the design's cells whose held-out learning rises linearly in training compute, reaching
    ``gain`` at the branching rule's final compute (90 x 208 passes): the equal-compute reading is the gain exactly,
    the equal-updates reading 304/208 of it for the three-step rules."""
    from grpo_bench.config import metrics
    from grpo_bench.suite.results import COLUMNS

    budget = 90 * PASSES["branch"]
    rows = [{"suite": "factors", "kind": "suite", "text": json.dumps({"name": "factors"})}]
    for i, (point, gain) in enumerate(gains.items()):
        labels = {"method": "flow_grpo"}
        for factor, level in zip(DESIGN["factors"], point):
            labels.update(DESIGN["factors"][factor][level])
        per = PASSES["branch" if point[0] == "branch" else "other"]
        for seed in seeds:
            base = {"suite": "factors", "cell": f"c{i}-{seed}", "group": " ".join(point), "setting": "A",
                    "method": "flow_grpo", "kl": "fixed", "equalizer": False, "seed": seed}
            rows.append({**base, "kind": "cell", "metric": "wall_time", "value": 1.0, "text": json.dumps(
                {"labels": {**labels, "seed": seed}, "config": config or {**labels, "seed": seed}, "status": "done"})})
            rows += [{**base, "kind": "update", "update": u, "metric": metrics.COMPUTE_TRAINING,
                      "value": float(per * (u + 1))} for u in range(90)]  # after update u: u + 1 updates' passes
            if training is not None:  # the per-update training metrics: a value per (point, seed) and update
                rows += [{**base, "kind": "update", "update": u, "metric": m, "value": training(point, seed) + u}
                         for u in range(3) for m in ("reward", "policy_loss", "kl")]
            for u in (0, *eval_at, 90):
                learned = gain * per * u / budget + 0.01 * seed
                rows += [{**base, "kind": "update", "update": u, "metric": f"eval_oracle_{d}",
                          "value": 0.5 + 0.01 * seed + learned / 3} for d in ("vq", "mq", "ta")]
    frame = pd.DataFrame(rows)
    for column, kind in COLUMNS.items():
        frame[column] = (frame[column] if column in frame else pd.Series([None] * len(frame))).astype(kind)
    return frame


def test_the_equal_compute_reading_recovers_effects_that_the_equal_updates_reading_inflates(tmp_path):
    from grpo_bench.report import factors
    from grpo_bench.report.parts import Context

    mains = {"step_rule": [0.0, 0.1, -0.2, 0.1], "kernel": [0.05, -0.05, 0.0, 0.0], "objective": [0.02, -0.01, -0.01]}
    gains = {p: 0.3 + sum(mains[f][LEVELS[f].index(lv)] for f, lv in zip(LEVELS, p)) for p in map(tuple,
                                                                                               DESIGN["points"])}
    ctx = Context(df=_results(gains), out=tmp_path, spec={"design": DESIGN})
    effects = factors._effects(ctx)
    at_compute = effects[effects["reading"] == "equal compute"]
    at_updates = effects[effects["reading"] == "equal updates"]
    for factor, truth in mains.items():
        np.testing.assert_allclose(at_compute[at_compute["effect"] == factor]["estimate"], truth, atol=1e-9)
    inflated = at_updates[at_updates["effect"] == "step_rule"].set_index("level")["estimate"]
    assert inflated["branch"] < mains["step_rule"][3] - 0.05  # three-step rules learn 304/208 as much by update 90
    (section,) = factors.factor_effects_table(ctx)
    assert "Equal compute" in section.body and "Equal updates" in section.body
    assert "not available" not in section.how


def test_without_compute_counters_the_table_says_equal_compute_is_not_available(tmp_path):
    from grpo_bench.config import metrics
    from grpo_bench.report import factors
    from grpo_bench.report.parts import Context

    # cells stored without counters whose config builds no closed form (a removed method): NaN counts
    df = _results({tuple(p): 0.1 for p in DESIGN["points"]}, config={"method": "a_removed_method"})
    df = df[df["metric"] != metrics.COMPUTE_TRAINING]
    (section,) = factors.factor_effects_table(Context(df=df, out=tmp_path, spec={"design": DESIGN}))
    assert "Equal compute: not available" in section.how and "Equal updates" in section.body


def test_the_liveness_table_counts_the_pairs_that_trained_identically(tmp_path):
    """clipped and kl_mask train identically (neither acts), ratio_norm differs; every other factor's levels
    differ too, so only the objective's clipped-vs-kl_mask pairs are inert."""
    from grpo_bench.report import factors
    from grpo_bench.report.parts import Context

    def training(point, seed):
        rule, kernel, objective = point
        code = {"clipped": 0, "kl_mask": 0, "ratio_norm": 1}[objective]
        return 100 * LEVELS["step_rule"].index(rule) + 10 * LEVELS["kernel"].index(kernel) + code + 0.001 * seed

    points = [tuple(p) for p in DESIGN["points"]]
    df = _results({p: 0.1 for p in points}, training=training)
    table = factors.inert_contrasts(df, DESIGN).set_index(["factor", "levels"])
    both = sum(1 for p in points if p[2] == "clipped" and (p[0], p[1], "kl_mask") in points)  # pairs in the fraction
    assert both > 0 and tuple(table.loc[("objective", "clipped vs kl_mask")]) == (2 * both, 2 * both)  # 2 seeds
    assert table.loc[("objective", "kl_mask vs ratio_norm"), "identical"] == 0
    assert (table.loc["step_rule", "identical"] == 0).all() and (table.loc["kernel", "identical"] == 0).all()
    (section,) = factors.factor_liveness_table(Context(df=df, out=tmp_path, spec={"design": DESIGN}))
    assert f"{2 * both} (100%)" in section.body and "zero by the recipe" in section.how


def test_cells_run_on_another_machine_or_precision_are_no_pair_for_the_liveness_table():
    """A tuning grid may mix machines: two cells on different arithmetic differ in their last bits whatever their
    levels do, so the table pairs a cell only with cells of its own precision and machine."""
    from grpo_bench.report import factors

    points = [tuple(p) for p in DESIGN["points"]]
    df = _results({p: 0.1 for p in points}, training=lambda point, seed: {"ratio_norm": 1}.get(point[2], 0))
    cells = df["kind"] == "cell"
    info = df.loc[cells, "text"].map(json.loads)
    moved = info.map(lambda i: i["labels"].get("objective") == "kl_mask" and i["labels"]["seed"] == 1001)
    df.loc[cells, "text"] = [json.dumps({**i, "precision": "bf16" if m else "fp32",
                                         "machine": "cpu B, 2 CPUs, no GPU" if m else "cpu A, 2 CPUs, no GPU"})
                             for i, m in zip(info, moved)]
    table = factors.inert_contrasts(df, DESIGN).set_index(["factor", "levels"])
    both = sum(1 for p in points if p[2] == "clipped" and (p[0], p[1], "kl_mask") in points)
    assert tuple(table.loc[("objective", "clipped vs kl_mask")]) == (both, both)  # seed 1000's pairs alone


def test_a_design_read_back_with_sorted_keys_gets_its_factor_order_back():
    """A results table stores the suite's record with sorted keys (kernel, objective, step_rule), but the points
    list step rule, kernel, objective: the one order under which every point fits is the suite's own."""
    from grpo_bench.suite.design import in_point_order

    stored = json.loads(json.dumps(load_suite(ROOT / "suites" / "factors.yaml").design.to_dict(), sort_keys=True))
    assert list(stored["factors"]) == ["kernel", "objective", "step_rule"]
    assert list(in_point_order(stored)["factors"]) == list(DESIGN["factors"]) == ["step_rule", "kernel", "objective"]
    both = {"factors": {"a": {"on": {}, "off": {}}, "b": {"on": {}, "off": {}}}, "points": [["on", "off"]]}
    assert in_point_order(both) is both  # two orders fit: left for parse_design to judge
