"""`run --until-decided` on a factorial suite (report/factor_looks.py): its headline comparisons are the design's
main effects, each seed's own fit giving the paired difference, so a look decides exactly what the factor_effects
table shows; the look loop runs on a fake trainer whose sage kernel learns more."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from decide_support import run_decided
from scipy import stats
from suite_support import write_suite

from grpo_bench.cli.decide import DECIDE_FILE
from grpo_bench.errors import UserError
from grpo_bench.report.factor_looks import per_seed_main_effects
from grpo_bench.report.factors import fit_effects
from grpo_bench.report.sequential import EFFECT, OPEN, PRECISE, decide_look
from grpo_bench.suite.parse import load_suite

from .test_factors import DESIGN, LEVELS, _synthetic


def test_each_seeds_fit_gives_the_tables_estimate_and_interval():
    """The mean of the per-seed main effects is the pooled fit's estimate, and the t interval of those per-seed
    values at 5% is the table's seed-clustered 95% interval: a look at level 0.05 decides what the table shows."""
    frame, _, _ = _synthetic(noise=0.3, seeds=(0, 1, 2, 3, 4))
    per_seed = per_seed_main_effects(frame, DESIGN)
    table = fit_effects(frame, LEVELS, DESIGN["estimates"], "y")
    mains = table[table["effect"].isin(LEVELS)]
    assert sorted(per_seed) == sorted(f"{r.effect}: {r.level}" for r in mains.itertuples()) and len(per_seed) == 11
    decided = decide_look(per_seed, 0.05, 1, [5])  # one planned look of 5 seeds: its level is the whole 0.05
    for r in mains.itertuples():
        values = np.array(per_seed[f"{r.effect}: {r.level}"])
        half = stats.t.ppf(0.975, 4) * values.std(ddof=1) / math.sqrt(5)
        assert values.size == 5 and values.mean() == pytest.approx(r.estimate, abs=1e-12)
        assert half == pytest.approx((r.high - r.low) / 2, rel=1e-9)
        assert decided[f"{r.effect}: {r.level}"].half == pytest.approx(half, rel=1e-9)


def test_a_seed_missing_a_design_point_gives_no_estimate():
    frame, _, _ = _synthetic(noise=0.3, seeds=(0, 1, 2))
    frame = frame.drop(frame.index[(frame["seed"] == 1)][:1])  # seed 1 lacks its first point
    per_seed = per_seed_main_effects(frame, DESIGN)
    assert all(math.isnan(v[1]) and math.isfinite(v[0]) and math.isfinite(v[2]) for v in per_seed.values())


def _design_suite(tmp_path, seeds, decide, **extra):
    """flow_grpo at two kernels x two objectives, every point; the fake trainer's sage kernel learns more."""
    data = {"name": "fac", "base": {"updates": 2, "eval_every": 1, "steps": 4, "eval_samples": 1},
            "design": {"method": "flow_grpo",
                       "factors": {"kernel": {"flow": {"kernel": "flow"}, "sage": {"kernel": "sage"}},
                                   "objective": {"clipped": {"objective": "clipped"},
                                                 "kl_mask": {"objective": "kl_mask"}}},
                       "points": "full", "estimates": ["kernel", "objective", "kernel:objective"],
                       "not_estimated": []},
            "seeds": seeds, "report": {"tables": ["factor_effects"], "figures": []}, "decide": decide, **extra}
    return load_suite(write_suite(tmp_path / "fac.yaml", data))


def test_a_factorial_decides_its_main_effects_and_the_table_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("DECIDE_EFFECT", "1.0")
    monkeypatch.setenv("DECIDE_NOISE", "0.001")
    code, printed = run_decided(_design_suite(tmp_path, [0, 1, 2], {"max_seeds": 9, "block": 3}), tmp_path / "runs")
    assert code == 0, printed
    record = json.loads((tmp_path / "runs" / "fac" / DECIDE_FILE).read_text())
    assert record["stopped"] == {"look": 1, "n": 3, "reason": "decided"}
    verdicts = {c["row"]: (c["verdict"], round(c["diff"], 2)) for c in record["looks"][0]["comparisons"]}
    # the oracle's overall is the sum of its three dimensions (data.oracle_overall), each rising by 1 under sage:
    # in effect coding sage sits 3/2 above the grand mean, flow 3/2 below; the objective does nothing
    assert verdicts == {"kernel: flow": (EFFECT, -1.5), "kernel: sage": (EFFECT, 1.5),
                        "objective: clipped": (PRECISE, 0.0), "objective: kl_mask": (PRECISE, 0.0)}
    assert "4 of 4 comparisons decided (2 effect, 2 precise)" in printed
    report = (tmp_path / "runs" / "fac" / "report" / "report.md").read_text()
    assert "| sequential |" in report.replace("sequential |\n", "sequential |") and "effect (look 1)" in report
    assert "Seeding stopped at look 1 (3 seeds)" in report


def test_a_factorial_without_an_effect_runs_its_looks_to_max_seeds(tmp_path, monkeypatch):
    monkeypatch.setenv("DECIDE_NOISE", "1.0")
    code, printed = run_decided(_design_suite(tmp_path, [0, 1], {"max_seeds": 4, "block": 1}), tmp_path / "runs")
    record = json.loads((tmp_path / "runs" / "fac" / DECIDE_FILE).read_text())
    assert code == 0 and [lk["n"] for lk in record["looks"]] == [2, 3, 4], printed
    assert record["stopped"]["reason"] == "max_seeds"
    assert any(c["verdict"] == OPEN for c in record["looks"][-1]["comparisons"])


def test_a_suite_with_neither_baseline_nor_design_is_still_refused(tmp_path):
    data = {"name": "plain", "base": {"updates": 2, "steps": 4}, "grid": {"method": ["flow_grpo"]}, "seeds": [0, 1],
            "report": {"tables": ["factor_effects"]}, "decide": {"max_seeds": 4}}
    with pytest.raises(UserError, match=r"report.baseline \(or a design's main effects\)"):
        run_decided(load_suite(write_suite(tmp_path / "plain.yaml", data)), tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
