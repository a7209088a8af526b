"""Study analysis on synthetic votes with a known win rate and a known clustering: the clustered
bootstrap's width matches the closed-form binomial width at the cluster level, ties count half,
sides are resolved, attention-check failures are excluded, Bradley–Terry and alpha match closed forms."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from grpo_bench.errors import UserError
from grpo_bench.report.stats import cluster_bootstrap
from grpo_bench.study import table3, votes
from grpo_bench.study.analysis import alpha, alpha_gap, analyze, bradley_terry

Z = 1.959963984540054


def test_cluster_bootstrap_width_follows_the_number_of_clusters_not_of_votes():
    raters, prompts = np.meshgrid(np.arange(40), np.arange(20), indexing="ij")
    raters, prompts = raters.ravel(), prompts.ravel()
    by_rater = (raters < 12).astype(float)  # every vote of a rater is the same: 40 independent units, p = 0.3
    mean, lo, hi = cluster_bootstrap(by_rater, [raters, prompts], n_boot=4000, seed=1)
    assert mean == pytest.approx(0.3)
    assert (hi - lo) / 2 == pytest.approx(Z * math.sqrt(0.3 * 0.7 / 40), rel=0.15)
    assert (hi - lo) / 2 > 3 * Z * math.sqrt(0.3 * 0.7 / len(raters))  # the naive (iid) interval is far too narrow
    by_prompt = (prompts < 6).astype(float)  # now the prompt decides: 20 units
    mean, lo, hi = cluster_bootstrap(by_prompt, [raters, prompts], n_boot=4000, seed=2)
    assert (hi - lo) / 2 == pytest.approx(Z * math.sqrt(0.3 * 0.7 / 20), rel=0.15)


def test_seed_bootstrap_of_two_seeds_has_the_closed_form_percentiles():
    # seed 0: mean 1.0, seed 1: mean 0.25 -> resampled means 1.0 (p 1/4), 0.625 (1/2), 0.25 (1/4)
    mean, lo, hi = cluster_bootstrap([1, 1, 0.5, 0], [[0, 0, 1, 1]], n_boot=4000)
    assert (mean, lo, hi) == (0.625, 0.25, 1.0)


def test_one_cluster_gives_no_interval_and_says_so():
    from grpo_bench.report.stats import interval_text

    mean, lo, hi = cluster_bootstrap([1, 0, 0.5, 1], [[0, 0, 0, 0]])
    assert mean == 0.625 and math.isnan(lo) and math.isnan(hi)
    assert interval_text(lo, hi, 1) == "n/a (1 seed)"
    assert interval_text(0.25, 1.0, 2) == "[0.250, 1.000]"


def test_bradley_terry_of_two_rows_is_the_log_odds_of_the_win_rate():
    bt = bradley_terry({("a", "b"): 7.5, ("b", "a"): 2.5}, ["a", "b"])
    assert bt["a"] - bt["b"] == pytest.approx(math.log(7.5 / 2.5), rel=1e-6) and bt["a"] + bt["b"] == pytest.approx(0)
    # a chain a > b > c with equal margins: equal steps in log-strength
    bt = bradley_terry({("a", "b"): 3, ("b", "a"): 1, ("b", "c"): 3, ("c", "b"): 1}, ["a", "b", "c"])
    assert bt["a"] - bt["b"] == pytest.approx(bt["b"] - bt["c"], rel=1e-4)


def test_krippendorff_alpha_is_one_for_perfect_agreement_and_low_for_noise():
    same = pd.DataFrame([{"rater": r, "pair_id": f"p{p}", "outcome": [0, 0.5, 1][p % 3]}
                         for r in range(4) for p in range(9)])
    assert alpha(same) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    noise = same.assign(outcome=rng.choice([0, 0.5, 1], len(same)))
    assert alpha(noise) < 0.3
    # undefined cases say why (the table prints the reason next to its dash)
    assert alpha_gap(same[same["rater"] == 0]) == "needs votes of 2 raters"
    one_each = same[same["rater"] == same["pair_id"].str[1:].astype(int) % 4]
    assert alpha_gap(one_each) == "no pair was rated by 2 raters" and math.isnan(alpha(one_each))
    assert "no disagreement" in alpha_gap(same.assign(outcome=1.0))


# --- a synthetic kit ------------------------------------------------------------------------
TARGET, BASE = "sage_grpo kl=dual", "dance_grpo kl=none"
N_PROMPTS, N_RATERS = 10, 6


def _hex(prefix: str, i: int) -> str:
    return f"{prefix}{i:07x}"


def _kit(root, outcomes, fail_rater=None, flip_repeat_rater=None):
    """Main pairs p: target clip t_p vs baseline clip b_p; outcomes[r][p] in {1, 0.5, 0}. Sides vary by
    (rater, pair). One identical and one broken check; one repeat of pair 0."""
    clips, key_pairs, pairs = {}, {}, []
    for p in range(N_PROMPTS):
        t, b, pid = _hex("a", p), _hex("b", p), _hex("c", p)
        clips[t] = {"row": TARGET, "seed": 0, "prompt": f"prompt {p}", "sample": 0,
                    "scores": {"oracle_vq": 1.0, "oracle_mq": 0.0, "oracle_ta": 0.0, "judge_reward": 1.0}}
        clips[b] = {"row": BASE, "seed": 0, "prompt": f"prompt {p}", "sample": 0,
                    "scores": {"oracle_vq": 0.0, "oracle_mq": 1.0, "oracle_ta": 0.0, "judge_reward": 0.0}}
        key_pairs[pid] = {"kind": "main", "target": t, "baseline": b, "baseline_row": BASE}
        pairs.append({"id": pid, "prompt": f"prompt {p}", "clips": [t, b]})
    rep, same, brk, bad = "dd000000", "ee000000", "ff000000", "bbbbbbbb"
    key_pairs[rep] = {**key_pairs[_hex("c", 0)], "kind": "repeat", "of": _hex("c", 0)}
    key_pairs[same] = {"kind": "identical", "clip": _hex("a", 1)}
    key_pairs[brk] = {"kind": "broken", "intact": _hex("a", 2), "broken": bad}
    clips[bad] = {**clips[_hex("a", 2)], "broken": True, "scores": {}}
    pairs += [{"id": rep, "prompt": "prompt 0", "clips": [_hex("a", 0), _hex("b", 0)]},
              {"id": same, "prompt": "prompt 1", "clips": [_hex("a", 1), _hex("a", 1)]},
              {"id": brk, "prompt": "prompt 2", "clips": [_hex("a", 2), bad]}]
    (root / "pairs.json").write_text(json.dumps({"salt": "00", "pairs": pairs}))
    (root / "key.json").write_text(json.dumps({"target": TARGET, "baselines": [BASE], "setting": "B", "world": True,
                                               "clips": clips, "pairs": key_pairs}))
    rng = np.random.default_rng(7)
    con = votes.connect(root / "votes.sqlite")

    def vote(rater, pid, a, b, wanted_by_dim):
        left, right = (a, b) if rng.random() < 0.5 else (b, a)
        rows = []
        for dim, wanted in wanted_by_dim.items():
            choice = "tie" if wanted is None else ("left" if wanted == left else "right")
            rows.append((rater, pid, dim, choice, left, right, "2026-01-01T00:00:00", "2026-01-01T00:00:05"))
        votes.record(con, rows)

    for r in range(N_RATERS):
        rater = f"rater{r}"
        for p in range(N_PROMPTS):
            t, b = _hex("a", p), _hex("b", p)
            pick = {1: t, 0: b, 0.5: None}[outcomes[r][p]]
            vote(rater, _hex("c", p), t, b, {"vq": pick, "mq": pick, "ta": pick})
        pick0 = {1: _hex("a", 0), 0: _hex("b", 0), 0.5: None}[outcomes[r][0]]
        if r == flip_repeat_rater:
            pick0 = _hex("b", 0) if pick0 != _hex("b", 0) else _hex("a", 0)
        vote(rater, rep, _hex("a", 0), _hex("b", 0), {"vq": pick0, "mq": pick0, "ta": pick0})
        vote(rater, same, _hex("a", 1), _hex("a", 1), dict.fromkeys(("vq", "mq", "ta"), None))
        keep = bad if r == fail_rater else _hex("a", 2)
        vote(rater, brk, _hex("a", 2), bad, dict.fromkeys(("vq", "mq", "ta"), keep))
    con.close()
    return root


def test_analysis_recovers_a_known_win_rate_and_excludes_inattentive_raters(tmp_path):
    # raters 0-4: target wins 6 prompts, ties 2, loses 2 -> (6 + 1) / 10 = 0.7; rater 5 (fails the broken-clip
    # check) always prefers the baseline and must not move the rate
    honest = [1, 1, 1, 1, 1, 1, 0.5, 0.5, 0, 0]
    outcomes = [honest] * 5 + [[0] * N_PROMPTS]
    kit = _kit(tmp_path, outcomes, fail_rater=5, flip_repeat_rater=0)
    result = analyze(kit)
    assert result["raters"] == {"total": 6, "excluded": 1, "kept": 5, "min_attention": 0.75}
    rates = {r["dimension"]: r for r in result["win_rates"]}
    for dim in ("vq", "mq", "ta"):
        assert rates[dim]["rate"] == pytest.approx(0.7) and rates[dim]["votes"] == 50
        assert rates[dim]["ci_low"] < 0.7 < rates[dim]["ci_high"]
    # every rater answers the same way, so the spread is over prompts only: 10 clusters
    assert rates["vq"]["ci_high"] - rates["vq"]["ci_low"] > 2 * Z * math.sqrt(0.7 * 0.3 / 10) * 0.7
    bt = result["bradley_terry"]["vq"]
    assert bt[TARGET] - bt[BASE] == pytest.approx(math.log(0.7 / 0.3), rel=1e-5)
    assert result["alpha"]["vq"] == pytest.approx(1.0)  # the kept raters agree perfectly
    assert result["consistency"]["vq"] == {"rate": pytest.approx(4 / 5), "repeats": 5}
    # humans vs oracle: the oracle prefers the target on vq and the baseline on mq; non-tie votes 8 per rater
    assert result["oracle_agreement"]["vq"]["rate"] == pytest.approx(6 / 8)
    assert result["oracle_agreement"]["mq"]["rate"] == pytest.approx(2 / 8)
    assert result["oracle_agreement"]["ta"]["votes"] == 0  # oracle ties: no verdict
    assert result["judge_agreement"]["ta"]["rate"] == pytest.approx(6 / 8)
    path = table3.write(kit, result)
    text = path.read_text()
    assert "70.0% [" in text and "1 excluded" in text and "a tie counts as half a win" in text
    csv = pd.read_csv(kit / "analysis" / "table3.csv")
    assert set(csv["dimension"]) == {"vq", "mq", "ta"} and csv["rate"].tolist() == pytest.approx([0.7] * 3)
    assert (kit / "analysis" / "table3.tex").read_text().startswith(r"\begin{tabular}")
    assert (kit / "analysis" / "table3.png").stat().st_size > 2000


def test_position_bias_counts_left_choices_and_an_empty_kit_is_a_user_error(tmp_path):
    outcomes = [[1] * N_PROMPTS] * N_RATERS
    kit = _kit(tmp_path, outcomes)
    raw = votes.read_votes(kit / "votes.sqlite")
    main = raw[raw["pair_id"].str.startswith("c") & (raw["dimension"] == "vq")]
    expected = (main["choice"] == "left").mean()  # every vote picks the target; sides were random
    assert 0 < expected < 1
    assert analyze(kit)["position_left"]["vq"]["rate"] == pytest.approx(expected)
    (kit / "votes.sqlite").unlink()
    with pytest.raises(UserError, match="no votes yet"):
        analyze(kit)


def test_cli_analyze_prints_the_win_rates_not_only_a_path(tmp_path):
    from typer.testing import CliRunner

    from grpo_bench.cli import app

    honest = [1, 1, 1, 1, 1, 1, 0.5, 0.5, 0, 0]
    kit = _kit(tmp_path, [honest] * 5 + [[0] * N_PROMPTS], fail_rater=5)
    res = CliRunner().invoke(app, ["study", "analyze", str(kit), "--n-boot", "200"], terminal_width=200)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "5 of 6 raters kept (1 excluded by attention checks)" in out
    assert f"vs {BASE}: VQ 70.0% [" in out and "(50 votes per dimension)" in out
    assert "table3.md" in out
