"""The report from a small hand-written results table: numbers against hand-computed means,
t-intervals, paired differences and Wilson intervals; every section and figure rendered."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.report.render import render_report
from grpo_bench.report.stats import mean_ci, wilson
from grpo_bench.suite.results import COLUMNS, read_table
from grpo_bench.suite.run_folder import RESULTS

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
    spec = {"tables": ["table2", "winrates", "table1", "power"], "baseline": {"method": "dance_grpo"}, "smooth": 1,
            "figures": ["reward_curves", "equalizer", "grad_norms", "kl_curves", "drift", "hacking", "strips"]}
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
            # held-out eval: at update 0 the shared base model (identical for every group), after the last
            # update the final values above
            start = {"eval_reward": 0.0, "eval_oracle_vq": 0.5, "eval_oracle_mq": 0.5, "eval_oracle_ta": 0.5,
                     "eval_manifold": 0.15}
            end = {m: float(v[seed]) for m, v in metrics.items() if m.startswith("eval_")}
            end["eval_reward"] = 0.2 * (seed + 1) * (2 if eq else 1)
            for u, values in ((0, start), (2, end)):
                rows += [_row(group, seed, kind="update", update=u, metric=m, value=v)
                         for m, v in (*values.items(), ("eval_at", float(u)))]
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


def test_table2_measures_learning_from_update_0_against_hand_computed_means_and_intervals(run_dir):
    render_report(run_dir)
    csv = pd.read_csv(run_dir / "report" / "tables" / "table2.csv").set_index("group")
    # oracle overall, setting B: 0.5*vq + 0.5*mq + ta; at update 0: 0.25 + 0.25 + 0.5 = 1.0 for everyone;
    # dance after training: 0.45, 0.55, 0.65 -> learning -0.55, -0.45, -0.35
    assert csv.loc["dance_grpo kl=none", "Oracle_mean"] == pytest.approx(-0.45)
    assert csv.loc["dance_grpo kl=none", "Oracle_ci"] == pytest.approx(T_975_2 * 0.1 / math.sqrt(3))
    # sage: vq 0.3, mq 0.5/0.7/0.9, ta 0.2 -> 0.6, 0.7, 0.8 -> learning -0.4, -0.3, -0.2
    assert csv.loc["sage_grpo kl=dual", "Oracle_mean"] == pytest.approx(-0.3)
    assert csv.loc["sage_grpo kl=dual", "Judge_mean"] == pytest.approx(0.8)  # 0.4, 0.8, 1.2
    # the rollout reward is a diagnostic read from the final rows: [1, 2, 3] and [2, 4, 6]
    half = T_975_2 / math.sqrt(3)
    assert csv.loc["dance_grpo kl=none", "Rollout reward_mean"] == pytest.approx(2.0)
    assert csv.loc["sage_grpo kl=dual", "Rollout reward_ci"] == pytest.approx(2 * half)
    md = (run_dir / "report" / "tables" / "table2.md").read_text()
    assert "**-0.300 ± 0.248**" in md  # best learning on the oracle, bold
    assert "**-0.050 ± 0.000**" in md  # Manifold: lower is better (dance 0.15 -> 0.10)
    assert "| 4.000 ± 4.968 |" in md and "**4.000" not in md  # the diagnostic is never bold
    tex = (run_dir / "report" / "tables" / "table2.tex").read_text()
    assert r"\textbf{-0.300 $\pm$ 0.248}" in tex and r"\toprule" in tex


def test_table2_reads_zero_for_every_row_when_nothing_is_learned(run_dir):
    frame = read_table(run_dir / RESULTS)
    last = (frame["kind"] == "update") & (frame["update"] == 2) & frame["metric"].str.startswith("eval_") & (
        frame["metric"] != "eval_at")
    first = frame[(frame["kind"] == "update") & (frame["update"] == 0) & frame["metric"].str.startswith("eval_")]
    lookup = first.set_index(["cell", "metric"])["value"]
    frame.loc[last, "value"] = [lookup[(c, m)] for c, m in frame.loc[last, ["cell", "metric"]].itertuples(index=False)]
    frame.to_parquet(run_dir / RESULTS, index=False)
    render_report(run_dir)
    csv = pd.read_csv(run_dir / "report" / "tables" / "table2.csv")
    heads = [c for c in csv.columns if c.endswith("_mean") and not c.startswith("Rollout")]
    assert heads and np.allclose(csv[heads].to_numpy(float), 0.0)


def test_hacking_scatter_counts_cells_whose_judge_rose_while_the_oracle_fell(run_dir):
    from grpo_bench.report.data import learning
    from grpo_bench.report.hacking import QUADRANTS, quadrant_counts

    render_report(run_dir)
    assert (run_dir / "report" / "figures" / "hacking.png").stat().st_size > 1000
    counts = quadrant_counts(learning(read_table(run_dir / RESULTS)))
    # every cell: judge +0.2..+1.2, oracle -0.55..-0.2 (see the fixture) -> all six in the hacking quadrant
    assert counts[QUADRANTS[(True, False)]] == 6 and sum(counts.values()) == 6
    assert "6 of 6 cells" in (run_dir / "report" / "report.md").read_text()
    assert (run_dir / "report" / "tables" / "power.csv").is_file()


def test_paired_learning_differences_against_the_baseline_with_holm_marks(run_dir):
    render_report(run_dir)
    paired = pd.read_csv(run_dir / "report" / "tables" / "table2_paired.csv")
    oracle = paired[paired["column"] == "Oracle"].iloc[0]
    # per seed: sage learning - dance learning = 0.15 on every seed (no spread: certain)
    assert oracle["diff_mean"] == pytest.approx(0.15) and oracle["diff_ci"] == pytest.approx(0.0, abs=1e-12)
    assert oracle["p_holm"] == 0.0
    vq = paired[paired["column"] == "oVQ"].iloc[0]
    # dance oVQ learning -0.3, -0.1, 0.1; sage -0.2 each -> differences 0.1, -0.1, -0.3
    assert vq["diff_mean"] == pytest.approx(-0.1) and vq["diff_ci"] == pytest.approx(T_975_2 * 0.2 / math.sqrt(3))
    md = (run_dir / "report" / "tables" / "table2_paired.md").read_text()
    assert "+0.150 ± 0.000*" in md and "-0.100 ± 0.497 |" in md  # only the decided one is marked


def test_win_rates_pair_videos_by_seed_prompt_and_noise_per_dimension_with_seed_intervals(run_dir):
    render_report(run_dir)
    wr = pd.read_csv(run_dir / "report" / "tables" / "winrates.csv").set_index("dimension")
    overall = wr.loc["Overall"]
    assert (overall["a"], overall["b"], overall["pairs"], overall["seeds"], overall["wins"], overall["ties"]) == (
        "sage_grpo kl=dual", "dance_grpo kl=none", 4, 2, 2, 1)
    # seed 0: 2 wins of 2 (mean 1.0); seed 1: a tie and a loss (0.25). Resampling two seeds gives 1.0, 0.625
    # or 0.25 with probabilities 1/4, 1/2, 1/4, so the 2.5% and 97.5% percentiles are exactly 0.25 and 1.0.
    assert overall["win_rate"] == 0.625 and (overall["ci_low"], overall["ci_high"]) == (0.25, 1.0)
    # oVQ: sage ties, loses, loses, ties -> 0.25 on both seeds (no spread); oTA: wins, wins, tie, loss -> 0.625
    assert (wr.loc["oVQ", "win_rate"], wr.loc["oVQ", "ci_low"], wr.loc["oVQ", "ci_high"]) == (0.25, 0.25, 0.25)
    assert wr.loc["oTA", "win_rate"] == 0.625 and wr.loc["oMQ", "pairs"] == 4
    md = (run_dir / "report" / "tables" / "winrates.md").read_text()
    assert "0.625 [0.250, 1.000]" in md and "| oVQ |" in md


def test_report_links_a_study_analysis_of_this_run(run_dir):
    kit = run_dir / "study"
    (kit / "analysis").mkdir(parents=True)
    (kit / "analysis" / "table3.md").write_text("# Table 3\n")
    (run_dir / "studies.json").write_text(json.dumps([str(kit)]))
    text = render_report(run_dir).read_text()
    assert "[study/analysis/table3.md](../study/analysis/table3.md)" in text


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
    for block in ("T10_matched", "T50_matched", "T10_default"):
        for ext in ("md", "tex", "csv"):
            assert (run_dir / "report" / "tables" / f"table1_{block}.{ext}").is_file()
    t1 = pd.read_csv(run_dir / "report" / "tables" / "table1.csv")
    dance = t1[t1["kernel"].str.startswith("dance") & (t1["levels"] == "matched 0.5")]
    # dance injects var = eta^2 * Delta per step: the steps sum to eta^2 * (sigma_0 - sigma_T) = 0.25 at any T
    assert sorted(dance["T"]) == [10, 50] and np.allclose(dance["noise_energy"], 0.25)
    ode = t1[t1["kernel"] == "ode"]
    assert np.allclose(ode["excess_final_var_err"], 0.0)


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


def test_strata_split_every_family_by_their_keys():
    """report.strata: [setting, kl] turns each (setting, kl) into its own family; row labels lose 'kl=…'."""
    import json as _json
    from pathlib import Path

    from grpo_bench.report import data as _data

    df = read_table(Path(__file__).resolve().parents[2] / "reports" / "ablate_equalizer" / "results.parquet")
    cells = df[df["kind"] == "cell"]
    expected = {f"{r.setting}, kl={_json.loads(r.text)['config']['kl']}" for r in cells.itertuples()}
    out = _data.stratify(df, ["setting", "kl"])
    got = set(out.loc[out["kind"] == "cell", "setting"])
    assert got == expected and len(got) > cells["setting"].nunique()
    assert not out.loc[out["kind"] == "cell", "group"].str.contains("kl=").any()
    assert (out["kind"] == df["kind"]).all() and len(out) == len(df)
    assert _data.stratify(df, ["setting"]) is df  # the default changes nothing


def test_the_oracle_track_has_no_judge_column():
    """A cell trained on the oracle logs the oracle composite as its 'reward': the report must not call it a judge."""
    import json as _json
    from pathlib import Path

    from grpo_bench.report import data as _data

    df = read_table(Path(__file__).resolve().parents[2] / "reports" / "ablate_equalizer" / "results.parquet")
    first = df.loc[df["kind"] == "cell", "cell"].iloc[0]
    row = (df["kind"] == "cell") & (df["cell"] == first)
    info = _json.loads(df.loc[row, "text"].iloc[0])
    info["config"]["reward"] = "world_oracle"
    df.loc[row, "text"] = _json.dumps(info)
    gain = _data.learning(df).set_index("cell")
    assert math.isnan(gain.loc[first, "eval_reward"]) and gain.drop(first)["eval_reward"].notna().all()
    vids = _data.videos(df)
    assert vids.loc[vids["cell"] == first, "judge_reward"].isna().all()
    assert vids.loc[vids["cell"] != first, "judge_reward"].notna().all()
