"""The power table measures learning (eval after training minus eval at update 0), paired by seed."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from grpo_bench.report.data import learning
from grpo_bench.report.parts import TABLES, Context
from grpo_bench.report.power import mde, seeds_needed
from grpo_bench.report.power_table import power_rows
from grpo_bench.report.tables import _fmt

SEEDS = [0, 1, 2, 3, 4]


def _frame(start: dict, end: dict) -> pd.DataFrame:
    """results.parquet rows for groups -> per-seed eval_oracle_overall parts at update 0 and 10."""
    rows = []
    for group, per_seed in end.items():
        method = group.split()[0]
        for seed in SEEDS:
            cell = f"{method}-{seed}"
            rows.append({"suite": "t", "cell": cell, "group": group, "setting": "A", "seed": seed, "kind": "cell",
                         "method": method, "kl": "none", "equalizer": False, "metric": "wall_time", "value": 1.0,
                         "text": json.dumps({"config": {"method": method}, "status": "done"})})
            for update, values in ((0, start), (10, per_seed)):
                for dim in ("vq", "mq", "ta"):  # oracle_overall (setting A) = vq + mq + ta = 3 * value
                    rows.append({"suite": "t", "cell": cell, "group": group, "setting": "A", "seed": seed,
                                 "kind": "update", "method": method, "kl": "none", "equalizer": False,
                                 "update": update, "metric": f"eval_oracle_{dim}", "value": values[seed] / 3})
    return pd.DataFrame(rows)


def test_no_learning_reads_zero_whatever_the_base_model_scores():
    base_scores = dict(zip(SEEDS, [0.3, -0.2, 0.9, 0.1, 0.5]))
    df = _frame(base_scores, {"dance_grpo kl=none": base_scores, "sage_grpo kl=dual": base_scores})
    gain = learning(df)
    assert np.allclose(gain["eval_oracle_overall"], 0.0)
    table = power_rows(df, {"method": "dance_grpo"})
    oracle = table[table["metric"] == "Oracle"].iloc[0]
    assert oracle["diff"] == 0.0 and oracle["verdict"] == "equivalent"  # identical: CI [0, 0] inside ±0.05


def test_paired_difference_interval_power_and_verdict_match_an_independent_computation():
    rng = np.random.default_rng(0)
    start = dict(zip(SEEDS, rng.normal(size=5)))
    base_gain, delta = rng.normal(0.1, 0.2, size=5), np.array([0.30, 0.22, 0.41, 0.18, 0.35])
    end = {"dance_grpo kl=none": {s: start[s] + base_gain[i] for i, s in enumerate(SEEDS)},
           "sage_grpo kl=dual": {s: start[s] + base_gain[i] + delta[i] for i, s in enumerate(SEEDS)}}
    table = power_rows(_frame(start, end), {"method": "dance_grpo"}, {"default": 0.05})
    row = table[table["metric"] == "Oracle"].iloc[0]
    sd = delta.std(ddof=1)
    assert row["n"] == 5 and row["row"] == "sage_grpo kl=dual" and row["baseline"] == "dance_grpo kl=none"
    assert row["diff"] == pytest.approx(delta.mean())
    assert row["ci"] == pytest.approx(stats.t.ppf(0.975, 4) * sd / math.sqrt(5))
    assert row["sd"] == pytest.approx(sd)
    assert row["mde"] == pytest.approx(mde(sd, 5))
    assert row["needed"] == seeds_needed(0.05, sd)
    # the family: Oracle, oVQ, oMQ, oTA share this p (each dimension moves by delta/3): Holm multiplies by 4
    assert row["p_holm"] == pytest.approx(4 * stats.ttest_1samp(delta, 0).pvalue)
    assert row["verdict"] == "decided: better"


def test_the_power_part_renders_its_table(tmp_path):
    start = dict(zip(SEEDS, [0.0] * 5))
    end = {"dance_grpo kl=none": {s: 0.0 for s in SEEDS}, "cps kl=none": {s: 0.01 * s for s in SEEDS}}
    sections = TABLES.get("power")(Context(_frame(start, end), tmp_path, {"baseline": {"method": "dance_grpo"}}))
    assert sections and "cps kl=none" in sections[0].body
    csv = pd.read_csv(tmp_path / "tables" / "power.csv")
    assert set(csv["verdict"]) <= {"open", "equivalent", "decided: better", "decided: worse"}


def test_report_spec_min_effect_is_validated_and_reaches_the_table(tmp_path):
    from grpo_bench.errors import UserError
    from grpo_bench.report.suite_parts import check_report_parts
    from grpo_bench.suite.report_section import parse_report

    assert parse_report({"min_effect": 0.03}, "s.yaml: ").min_effect == 0.03
    assert parse_report({"min_effect": {"Oracle": 0.02, "default": 0.1}}, "s.yaml: ").min_effect == {
        "Oracle": 0.02, "default": 0.1}
    check_report_parts(parse_report({"min_effect": {"Oracle": 0.02, "default": 0.1}}, "s.yaml: "), "s.yaml: ")
    with pytest.raises(UserError, match="s.yaml: .*Orcle.*allowed"):  # the column names are the report's
        check_report_parts(parse_report({"min_effect": {"Orcle": 0.02}}, "s.yaml: "), "s.yaml: ")
    with pytest.raises(UserError, match="report.min_effect must be a finite number > 0"):
        parse_report({"min_effect": -1}, "s.yaml: ")
    start = dict(zip(SEEDS, [0.0] * 5))
    end = {"dance_grpo kl=none": {s: 0.0 for s in SEEDS}, "cps kl=none": {s: 0.01 * s for s in SEEDS}}
    spec = {"baseline": {"method": "dance_grpo"}, "min_effect": {"Oracle": 0.02}}
    TABLES.get("power")(Context(_frame(start, end), tmp_path, spec))
    csv = pd.read_csv(tmp_path / "tables" / "power.csv").set_index("metric")
    assert csv.loc["Oracle", "min_effect"] == 0.02 and csv.loc["oVQ", "min_effect"] == 0.05


def _with_videos(df: pd.DataFrame, video_noise: dict) -> pd.DataFrame:
    """Add final-eval video rows (2 prompts x 2 samples per cell) whose mean is each cell's final value:
    group -> (seed -> within-prompt deviation) on oracle_vq; mq and ta copy the cell mean."""
    rows = []
    last = df[(df["kind"] == "update") & (df["update"] == 10)]
    for (cell, group, seed), part in last.groupby(["cell", "group", "seed"]):
        mean = part.set_index("metric")["value"]
        for prompt in ("p0", "p1"):
            for k, sign in enumerate((-1, 1)):
                for dim in ("vq", "mq", "ta"):
                    value = mean[f"eval_oracle_{dim}"] + (sign * video_noise[group][seed] if dim == "vq" else 0.0)
                    rows.append({"suite": "t", "cell": cell, "group": group, "setting": "A", "seed": seed,
                                 "kind": "video", "method": group.split()[0], "kl": "none", "equalizer": False,
                                 "metric": f"oracle_{dim}", "value": value, "prompt": prompt, "sample": k,
                                 "video_seed": seed})
    return pd.concat([df, pd.DataFrame(rows)], ignore_index=True)


def test_eval_noise_share_and_lever_from_the_paired_videos():
    start = dict(zip(SEEDS, [0.0] * 5))
    delta = np.array([0.02, -0.03, 0.05, 0.00, 0.01])
    end = {"dance_grpo kl=none": {s: 0.0 for s in SEEDS}, "sage_grpo kl=dual": dict(zip(SEEDS, delta))}
    # per prompt the baseline's two videos sit at mean ∓ 0.01 in oVQ, the other row's at mean ∓ 0.1 (same
    # samples paired): d = ∓0.09 around the seed's difference
    noise = {"dance_grpo kl=none": dict.fromkeys(SEEDS, 0.01), "sage_grpo kl=dual": dict.fromkeys(SEEDS, 0.1)}
    table = power_rows(_with_videos(_frame(start, end), noise), {"method": "dance_grpo"})
    oracle = table[table["metric"] == "Oracle"].iloc[0]
    # oracle_overall (setting A: vq + mq + ta) moves by the oVQ deviation; d per video is ±(0.1 - 0.01)
    per_video = (0.1 - 0.01) ** 2 * 2  # within-prompt variance of (-0.09, +0.09) with ddof 1
    assert oracle["eval_var"] == pytest.approx(per_video / 4)
    assert oracle["eval_share"] == pytest.approx(min(1.0, per_video / 4 / delta.std(ddof=1) ** 2))
    assert oracle["lever"] == "eval size" and oracle["eval_share"] == 1.0  # eval noise 0.004 > seed variance
    assert oracle["mde_eval_x4"] < oracle["mde"]
    omq = table[table["metric"] == "oMQ"].iloc[0]
    assert omq["eval_share"] == 0.0 and omq["lever"] == "seeds"  # mq has no video-to-video spread
    assert table.loc[table["metric"] == "Diversity", "lever"].tolist() in ([], ["–"])


def test_equivalence_verdict_uses_the_ninety_percent_interval(tmp_path):
    start = dict(zip(SEEDS, [0.0] * 5))
    d = np.array([0.010, 0.030, -0.005, 0.020, 0.012])  # 95%: |mean| + half = 0.0295; 90%: 0.0258
    end = {"dance_grpo kl=none": {s: 0.0 for s in SEEDS}, "cps kl=none": dict(zip(SEEDS, d))}
    table = power_rows(_frame(start, end), {"method": "dance_grpo"}, {"default": 0.028})
    row = table[table["metric"] == "Oracle"].iloc[0]
    assert abs(row["diff"]) + row["ci"] > 0.028 > abs(row["diff"]) + row["ci90"]
    assert row["verdict"] == "equivalent"
    sections = TABLES.get("power")(Context(_frame(start, end), tmp_path, {"baseline": {"method": "dance_grpo"},
                                                                          "min_effect": 0.028}))
    assert "TOST at 5%" in sections[0].how and "90% t-interval" in sections[0].how
    # Table 2b marks the same comparison ≈ (and not *: it is not decided)
    TABLES.get("table2")(Context(_frame(start, end), tmp_path, {"baseline": {"method": "dance_grpo"},
                                                                "min_effect": 0.028}))
    paired = (tmp_path / "tables" / "table2_paired.md").read_text()
    assert f"{_fmt(row['diff'], row['ci'], sign=True)}≈" in paired and "*" not in paired
    assert r"$\approx$" in (tmp_path / "tables" / "table2_paired.tex").read_text()
