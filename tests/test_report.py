"""The report from a small hand-written results table: numbers against hand-computed means,
t-intervals, paired differences and Wilson intervals; every section and figure rendered."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from grpo_bench.cli.commands import app
from grpo_bench.report.render import render_report
from grpo_bench.report.stats import mean_ci, wilson
from grpo_bench.suite.results import COLUMNS, RESULTS

T_975_2 = 4.302652729749464  # Student t quantile 0.975 with 2 degrees of freedom (tables)
GROUPS = {"dance_grpo kl=none": ("dance_grpo", "none", False), "sage_grpo kl=dual": ("sage_grpo", "dual", True)}
FINAL = {  # group -> metric -> values for seeds 0, 1, 2
    "dance_grpo kl=none": {"reward": [1, 2, 3], "reward_vq": [0, 0, 0], "eval_oracle_vq": [0.2, 0.4, 0.6],
                           "eval_oracle_mq": [0.5, 0.5, 0.5], "eval_oracle_ta": [0.1, 0.1, 0.1],
                           "eval_manifold": [0.1, 0.1, 0.1]},
    "sage_grpo kl=dual": {"reward": [2, 4, 6], "reward_vq": [1, 1, 1], "eval_oracle_vq": [0.3, 0.3, 0.3],
                          "eval_oracle_mq": [0.5, 0.7, 0.9], "eval_oracle_ta": [0.2, 0.2, 0.2],
                          "eval_manifold": [0.2, 0.2, 0.2]},
}
# (seed, prompt) -> oracle (vq, mq, ta) of each group's video; setting B weights (0.5, 0.5, 1)
VIDEOS = {
    (0, "p1"): {"dance_grpo kl=none": (0, 0, 0.1), "sage_grpo kl=dual": (0, 0, 0.5)},  # sage wins
    (0, "p2"): {"dance_grpo kl=none": (0.2, 0, 0), "sage_grpo kl=dual": (0, 0, 0.2)},  # sage wins (0.1 < 0.2)
    (1, "p1"): {"dance_grpo kl=none": (0.4, 0, 0), "sage_grpo kl=dual": (0, 0.4, 0)},  # tie
    (1, "p2"): {"dance_grpo kl=none": (0, 0, 0.9), "sage_grpo kl=dual": (0, 0, 0.3)},  # dance wins
}


def _row(group: str, seed: int, **kw) -> dict:
    method, kl, eq = GROUPS[group]
    return {"suite": "fixture", "cell": f"{method}-{seed}", "group": group, "setting": "B", "method": method,
            "kl": kl, "equalizer": eq, "seed": seed, **kw}


def fixture_results() -> pd.DataFrame:
    spec = {"tables": ["table2", "winrates", "table1"], "baseline": {"method": "dance_grpo"}, "smooth": 1,
            "figures": ["reward_curves", "equalizer", "grad_norms", "kl_curves", "drift", "strips"]}
    rows = [{"suite": "fixture", "kind": "suite", "text": json.dumps({"name": "fixture", "report": spec})}]
    for group, metrics in FINAL.items():
        method, kl, eq = GROUPS[group]
        for seed in range(3):
            cfg = {"method": method, "kl": kl, "equalizer": eq, "setting": "B", "seed": seed}
            rows.append(_row(group, seed, kind="cell", metric="wall_time", value=60.0,
                             text=json.dumps({"labels": {}, "config": cfg, "status": "done", "machine": "fixture"})))
            rows += [_row(group, seed, kind="final", metric=m, value=float(v[seed])) for m, v in metrics.items()]
            for u in range(3):
                rows += [_row(group, seed, kind="update", update=u, metric="reward", value=float(u + seed)),
                         _row(group, seed, kind="update", update=u, metric="kl", value=1e-3 * (u + 1)),
                         _row(group, seed, kind="update", update=u, metric="kl_weight", value=1e-5)]
            for u in (0, 2):
                rows += [_row(group, seed, kind="update", update=u, metric=m, value=v) for m, v in
                         (("eval_reward", 0.1 * u), ("eval_oracle_vq", 0.5), ("eval_oracle_mq", 0.5),
                          ("eval_oracle_ta", 0.5 - 0.1 * u), ("eval_at", float(u)))]
            rows.append(_row(group, seed, kind="grad", update=0, metric="grad_norm_per_step",
                             array=[1.0, 10.0, 100.0, math.nan] if not eq else [5.0, 6.0, 7.0, math.nan]))
            rows.append(_row(group, seed, kind="strip", prompt="p1", sample=0, shape=[1, 2, 4, 4, 3],
                             array=[float(seed * 40)] * 96))
    for (seed, prompt), per_group in VIDEOS.items():
        for group, scores in per_group.items():
            rows += [_row(group, seed, kind="video", prompt=prompt, sample=0, video_seed=seed * 10, metric=m, value=v)
                     for m, v in zip(("oracle_vq", "oracle_mq", "oracle_ta"), scores)]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


@pytest.fixture
def run_dir(tmp_path):
    fixture_results().to_parquet(tmp_path / RESULTS, index=False)
    return tmp_path


def test_t_interval_and_wilson_match_published_values():
    m, h, n = mean_ci([1, 2, 3])
    assert (m, n) == (2.0, 3) and h == pytest.approx(T_975_2 / math.sqrt(3), rel=1e-9)
    assert mean_ci([5.0])[1] != mean_ci([5.0])[1]  # NaN: no interval from one seed
    rate, lo, hi = wilson(8, 10)  # the textbook example: 8/10 -> [0.490, 0.943]
    assert rate == 0.8 and lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)


def test_table2_numbers_match_hand_computed_means_and_intervals(run_dir):
    render_report(run_dir)
    csv = pd.read_csv(run_dir / "report" / "tables" / "table2.csv").set_index("group")
    half = T_975_2 / math.sqrt(3)  # sample std of [1,2,3] is 1; of [2,4,6] is 2
    assert csv.loc["dance_grpo kl=none", "Overall_mean"] == pytest.approx(2.0)
    assert csv.loc["dance_grpo kl=none", "Overall_ci"] == pytest.approx(half)
    assert csv.loc["sage_grpo kl=dual", "Overall_ci"] == pytest.approx(2 * half)
    # oracle overall, setting B: 0.5*vq + 0.5*mq + ta; dance seeds: 0.45, 0.55, 0.65
    assert csv.loc["dance_grpo kl=none", "Oracle_mean"] == pytest.approx(0.55)
    assert csv.loc["dance_grpo kl=none", "Oracle_ci"] == pytest.approx(T_975_2 * 0.1 / math.sqrt(3))
    md = (run_dir / "report" / "tables" / "table2.md").read_text()
    assert "| B | sage_grpo kl=dual | 3 | **4.000 ± 4.968** |" in md  # best Overall in bold
    assert "**0.100 ± 0.000**" in md  # Manifold: lower is better
    tex = (run_dir / "report" / "tables" / "table2.tex").read_text()
    assert r"\textbf{4.000 $\pm$ 4.968}" in tex and r"\toprule" in tex


def test_paired_differences_against_the_baseline(run_dir):
    render_report(run_dir)
    paired = pd.read_csv(run_dir / "report" / "tables" / "table2_paired.csv")
    overall = paired[paired["column"] == "Overall"].iloc[0]
    # per-seed differences [1, 2, 3]
    assert overall["diff_mean"] == pytest.approx(2.0) and overall["diff_ci"] == pytest.approx(T_975_2 / math.sqrt(3))
    vq = paired[paired["column"] == "VQ"].iloc[0]
    assert vq["diff_mean"] == 1.0 and vq["diff_ci"] == 0.0
    md = (run_dir / "report" / "tables" / "table2_paired.md").read_text()
    assert "+1.000 ± 0.000*" in md  # interval excludes 0


def test_win_rates_pair_videos_by_seed_prompt_and_noise(run_dir):
    render_report(run_dir)
    wr = pd.read_csv(run_dir / "report" / "tables" / "winrates.csv").iloc[0]
    assert (wr["a"], wr["b"], wr["pairs"], wr["wins"], wr["ties"]) == ("sage_grpo kl=dual", "dance_grpo kl=none", 4, 2, 1)
    rate, lo, hi = wilson(2.5, 4)
    assert wr["win_rate"] == 0.625 and wr["ci_low"] == pytest.approx(lo) and wr["ci_high"] == pytest.approx(hi)
    assert 0 < lo < 0.625 < hi < 1


def test_report_embeds_every_table_and_figure_with_how_to_read(run_dir):
    path = render_report(run_dir)
    text = path.read_text()
    for fig in ("reward_curves", "equalizer", "grad_norms", "kl_curves", "drift", "strips_B"):
        assert f"](figures/{fig}.png)" in text
        assert (run_dir / "report" / "figures" / f"{fig}.png").stat().st_size > 2000
    for table in ("Table 2 ", "Table 2b", "Table 3", "Table 1", "Cells"):
        assert f"## {table}" in text
    assert text.count("*How to read:*") == text.count("\n## ")
    assert "Not available" not in text
    assert "max/min = 100.0" in text  # measured spread without the equalizer: 1 .. 100
    for ext in ("md", "tex", "csv"):
        assert (run_dir / "report" / "tables" / f"table1.{ext}").is_file()


def test_report_command_renders_and_missing_results_is_a_user_error(run_dir, tmp_path):
    res = CliRunner().invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert (run_dir / "report" / "report.md").is_file()
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert res.exit_code != 0 and "not found" in str(res.exception) and "train run folder" in str(res.exception)


def test_strip_pixels_come_back_as_stored(run_dir):
    from grpo_bench.report import data

    strips = data.strips(fixture_results())
    (prompt, arr), = strips[("B", "sage_grpo kl=dual")]
    assert prompt == "p1" and arr.shape == (2, 4, 4, 3) and arr.dtype == np.uint8 and arr.max() == 0  # seed 0


def test_header_says_when_the_last_run_trained_nothing():
    from grpo_bench.report.render import _last_run

    assert _last_run({}) == ""
    assert "trained no cell" in _last_run({"wall_s": 0.2, "jobs": 1, "ran": 0})
    text = _last_run({"wall_s": 90.0, "jobs": 2, "ran": 12})
    assert "1.5 min with 2 worker(s), training 12 cell(s)" in text
