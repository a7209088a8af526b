"""Learning at equal compute (grpo_bench/report/equal_compute.py) and the speed claims (claims/speed.py) on
synthetic results with known answers; the stored reports, which predate the counters, get derived compute."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_support import SEEDS
from report_support import eval_results as _results

from grpo_bench.report import equal_compute
from grpo_bench.report.claims import CONTRADICTED, NOT_TESTED, SUPPORTED, Claim, Faster, evaluate
from grpo_bench.report.claims.finding import NOT_AS_NAMED
from grpo_bench.report.parts import FIGURES, TABLES, Context
from grpo_bench.suite.results import read_table
from grpo_bench.suite.run_folder import RESULTS

ROOT = Path(__file__).resolve().parents[2]

NOISE = np.array([0.01, -0.01, 0.005, -0.005])
ROWS = {
    "cheap": {"method": "mix_grpo", "per_update": 100, "learning": {5: 0.1 + NOISE, 10: 0.2 + NOISE}},
    "dear": {"method": "dance_grpo", "per_update": 200, "learning": {5: 0.1 + NOISE, 10: 0.3 + NOISE}},
}


def test_at_compute_measured_or_interpolated():
    points = pd.DataFrame({"compute_training": [0.0, 500.0, 1000.0], "learning": [0.0, 0.1, 0.3],
                           "update": [0, 5, 10]})
    assert equal_compute.at_compute(points, 500.0) == (0.1, "update 5 (measured)")
    value, how = equal_compute.at_compute(points, 600.0)
    assert value == pytest.approx(0.1 + 0.2 * 0.2) and "interpolated, 20% of the way" in how
    assert math.isnan(equal_compute.at_compute(points, 1001.0)[0])


def test_matched_compute_is_where_the_cheapest_row_ends(tmp_path):
    mt = equal_compute.matched(_results(ROWS))
    assert set(mt["matched_compute"]) == {1000.0}  # cheap: 10 updates x 100
    cheap, dear = mt[mt["group"] == "cheap"], mt[mt["group"] == "dear"]
    np.testing.assert_allclose(cheap["learning_matched"], 0.2 + NOISE)  # its own end, measured
    np.testing.assert_allclose(dear["learning_matched"], 0.1 + NOISE)  # dear's update 5 = 1000 passes
    assert set(dear["how"]) == {"update 5 (measured)"} and set(dear["final_compute"]) == {2000.0}
    sections = TABLES.get("equal_compute")(Context(_results(ROWS), tmp_path, {}))
    body = sections[0].body
    assert "| A | dear | 4 | 2,000 | 2.00× |" in body and "-0.100 ±" in body  # dear − cheap at 1000, paired
    csv = pd.read_csv(tmp_path / "tables" / "equal_compute.csv")
    assert csv.loc[csv["group"] == "dear", "diff_vs_cheapest"].iloc[0] == pytest.approx(-0.1)
    figure = FIGURES.get("oracle_vs_compute")(Context(_results(ROWS), tmp_path, {}))
    assert (tmp_path / "figures" / "oracle_vs_compute_A.png").is_file() and "matched compute" in figure[0].how


def test_a_row_whose_seeds_spend_different_compute_is_drawn_at_one_x_per_eval_point(tmp_path):
    """Seeds of one row that spent different compute by an eval point (a random branching step) are placed at
    their mean compute there, so the line runs forward: its x values rise with the eval points."""
    rows = {"varied": {"method": "tempflow_grpo", "per_update": 100, "learning": {5: 0.1 + NOISE, 10: 0.2 + NOISE}}}
    df = _results(rows)
    compute = (df["metric"] == "compute_training") & (df["seed"] == SEEDS[-1])
    df.loc[compute, "value"] = df.loc[compute, "value"] * 1.5  # the last seed's updates cost 1.5x the others'
    ev = equal_compute.eval_compute(df)
    placed = equal_compute.at_eval_points(ev)
    per_point = placed.groupby("update")["compute_training"]
    assert (per_point.nunique() == 1).all()
    x = per_point.first()
    assert x.is_monotonic_increasing and x[10] == pytest.approx(1000 * (3 + 1.5) / 4)
    assert ev.groupby("update")["compute_training"].nunique().max() == 2  # the raw points differed by seed


def _claim(fraction: float, row: str = "mix_grpo", suite: str = "field") -> Claim:
    check = Faster(row={"method": row}, versus={"method": "dance_grpo"}, fraction=fraction,
                   tested_by="suites/field.yaml")
    return Claim("k", "mix is faster", suite, (check,), tested_by="suites/field.yaml")


def _write(tmp_path: Path, rows: dict) -> Path:
    (tmp_path / "field").mkdir()
    _results(rows).to_parquet(tmp_path / "field" / RESULTS, index=False)
    return tmp_path


def test_speed_claim_at_equal_quality(tmp_path):
    rows = {**ROWS, "cheap": {**ROWS["cheap"], "learning": {5: 0.2 + NOISE, 10: 0.3 + NOISE}}}
    root = _write(tmp_path, rows)
    v = evaluate(_claim(0.5), root)  # mix at 1000 passes (its end): 0.3, dance at its end: 0.3
    assert v.verdict == SUPPORTED and "(0.50×)" in v.effect
    v = evaluate(_claim(0.25), root)  # mix at 500 passes (update 5): 0.2, worse than 0.3 by more than 0.05
    assert v.verdict == CONTRADICTED


def test_speed_findings_carry_their_one_sided_p_and_join_the_ledger_wide_family(tmp_path):
    """A non-inferiority finding's p is the one-sided t-test against -margin on its side (scipy's, recomputed
    here), and the ledger-wide Holm family counts it: corrected with other tests it can only lose its decision."""
    from scipy import stats

    from grpo_bench.report.claims.rendering import ledger_wide

    rows = {**ROWS, "cheap": {**ROWS["cheap"], "learning": {5: 0.2 + NOISE, 10: 0.3 + 2 * NOISE}}}
    root = _write(tmp_path, rows)
    v = evaluate(_claim(0.5), root)
    (_, _, (finding,)), = v.checks
    d = (0.3 + 2 * NOISE) - (0.3 + NOISE)  # mix at its end (half dance's compute) minus dance at its end, per seed
    margin = 0.05  # the synthetic suite's minimum effect (the report default)
    expected = stats.ttest_1samp(d + margin, 0.0, alternative="greater").pvalue
    assert finding.toward == 1 and finding.p == pytest.approx(expected)
    strong = evaluate(_claim(0.25), root)  # contradicted: its p is of the other side
    (_, _, (worse,)), = strong.checks
    assert worse.toward == -1 and worse.p < 0.05
    wide, n_tests = ledger_wide([v, strong])
    assert n_tests == 2 and wide[1] == strong.verdict


def test_speed_claim_without_its_rows_is_not_tested_never_another_row(tmp_path):
    root = _write(tmp_path, ROWS)
    v = evaluate(_claim(0.5, row="diffusion_nft"), root)
    assert v.verdict == NOT_TESTED and "suites/field.yaml" in v.needed and "0 / 1 rows" in v.effect
    v = evaluate(_claim(0.5, suite="absent"), tmp_path)
    assert v.verdict == NOT_TESTED and "not found" in v.effect and "suites/field.yaml" in v.needed


def test_stored_reports_get_derived_compute():
    """reference_recipes predates the counters: every cell's compute is the closed form of its config."""
    df = read_table(ROOT / "reports" / "reference_recipes" / RESULTS)
    mt = equal_compute.matched(df)
    assert len(mt) == 24 and mt["derived"].all()
    finish = mt.groupby("method")["final_compute"].first().to_dict()
    # P=2, G=8, T=10, 90 updates: rollouts 16 x 10 = 160 passes an update; DanceGRPO as shipped trains 60% of
    # its 9 eligible steps (5) per sample, no KL: 16 x 5 forwards + as many backwards
    assert finish["dance_grpo"] == 90 * (160 + 2 * 16 * 5)
    assert set(mt["matched_compute"]) == {finish["dance_grpo"]}


def test_a_speed_claim_reads_quality_at_an_eval_at_the_named_compute_never_between_two(tmp_path):
    """Mix at 0.3 of dance's 2,000 passes: 600, reached after update 6 (100 a update); its evals are at 0, 5 and
    10, so the quality there was not measured: a straight line from update 5 to 10 does not stand in for it."""
    root = _write(tmp_path, ROWS)
    v = evaluate(_claim(0.3), root)
    assert v.verdict == NOT_AS_NAMED and "no held-out eval at update 6" in v.effect and "evals at 0, 5, 10" in v.effect
    assert "eval at update 6" in v.needed
    measured = evaluate(_claim(0.25), root)  # 500: update 5, an eval point: read there
    assert measured.verdict == CONTRADICTED and "at update 5 (compute 500, within the named 500)" in measured.effect
    # 0.27 x 2,000 = 540: the last update within it is still 5 (600 would exceed it): read at 5, never past it
    assert "at update 5 (compute 500, within the named 540)" in evaluate(_claim(0.27), root).effect


def test_a_speed_claim_states_the_part_of_its_saving_that_is_a_dropped_kl_reference(tmp_path):
    """Dance spends 200 passes a update, 50 of them its KL reference's; mix 100 and no reference. At half of
    dance's compute (1,000: mix's end) the saving is 2,000 - 1,000 = 1,000 passes, 500 of them (50%) the reference
    forwards that mix skips by having no KL."""
    rows = {"cheap": {**ROWS["cheap"], "reference": 0, "learning": {5: 0.2 + NOISE, 10: 0.3 + NOISE}},
            "dear": {**ROWS["dear"], "reference": 50}}
    v = evaluate(_claim(0.5), _write(tmp_path, rows))
    assert v.verdict == SUPPORTED and "saving 1,000 passes, of which a dropped KL reference 500 (50%)" in v.effect
    # at a quarter (500: mix's update 5) the saving is 1,500, the reference part 500 still: a third
    assert "saving 1,500 passes, of which a dropped KL reference 500 (33%)" in evaluate(_claim(0.25),
                                                                                       tmp_path).effect


def test_a_speed_claim_pairing_two_behaviours_is_undecided_unless_fingerprints_join_them(tmp_path):
    """As a t-test's pair: the faster row's cells at one commit and the rival's at another are one comparison only
    where the two commits' behaviour fingerprints are recorded equal."""
    import json

    rows = {**ROWS, "cheap": {**ROWS["cheap"], "learning": {5: 0.2 + NOISE, 10: 0.3 + NOISE}}}
    df = _results(rows)
    for group, commit in (("cheap", "1111111111aa"), ("dear", "2222222222bb")):
        at = (df["kind"] == "cell") & (df["group"] == group)
        df.loc[at, "text"] = [json.dumps({**json.loads(t), "git_commit": commit, "precision": "bf16"})
                              for t in df.loc[at, "text"]]
    (tmp_path / "field").mkdir()
    df.to_parquet(tmp_path / "field" / RESULTS, index=False)
    v = evaluate(_claim(0.5), tmp_path)
    assert v.verdict == "undecided" and "different code (1111111111/bf16, 2222222222/bf16)" in v.effect
    assert "(0.50×)" in v.effect and "re-run of `field` on one commit" in v.needed
    (tmp_path / "fingerprints.json").write_text(json.dumps({"1111111111aa": "h", "2222222222bb": "h"}))
    assert evaluate(_claim(0.5), tmp_path).verdict == SUPPORTED  # recorded identical: one behaviour
    (tmp_path / "fingerprints.json").write_text(json.dumps({"1111111111aa": "h", "2222222222bb": "other"}))
    assert evaluate(_claim(0.5), tmp_path).verdict == "undecided"


def test_the_stored_fields_diffusion_nft_speed_finding_equals_a_recomputation_from_its_raw_rows():
    """Claim 10 on reports/field, recomputed here from the eval rows alone: per seed, DiffusionNFT's (as shipped)
    summed oracle at its eval before update 24 minus at update 0, less FlowGRPO's (as shipped) at its end minus at
    update 0; the mean and the one-sided t bound at the look's level are the ledger's."""
    import json

    from scipy import stats

    from grpo_bench.report.claims import CLAIMS
    from grpo_bench.suite.results import load_results

    frame = load_results(ROOT / "reports" / "field")
    evals = frame[(frame["kind"] == "update") & frame["metric"].str.startswith(("eval_oracle_", "eval_at"))]
    configs = {r.cell: json.loads(r.text)["config"] for r in frame[frame["kind"] == "cell"].itertuples()}

    def learning(method: str, reward: str, seed: int, at: int) -> float:
        (cell,) = [c for c, k in configs.items() if (k["method"], k["reward"], k["seed"]) == (method, reward, seed)
                   and k.get("max_train_steps") is None]
        wide = evals[evals["cell"] == cell].pivot_table(index="update", columns="metric", values="value")
        oracle = wide.dropna(subset=["eval_at"]).set_index("eval_at").filter(like="eval_oracle_").sum(axis=1)
        return float(oracle[at] - oracle[0])

    # the field runs a sequential plan (suites/field.yaml: looks at 3, 6, 9 and 12 seeds): the ledger reads the
    # stored seeds as a look of it, at the level O'Brien-Fleming spending, 2 - 2 Phi(z_0.975 / sqrt(t)), newly
    # spends there (the whole 5% only at the last look)
    seeds = sorted({k["seed"] for k in configs.values()})
    spent = lambda n: 2 - 2 * stats.norm.cdf(stats.norm.ppf(0.975) / math.sqrt(n / 12))  # noqa: E731
    before = max([p for p in (3, 6, 9) if p < len(seeds)], default=0)
    level = spent(len(seeds)) - (spent(before) if before else 0.0)
    verdict = evaluate(next(c for c in CLAIMS if c.key == "diffusion_nft_speed"), ROOT / "reports")
    (_, _, findings), = verdict.checks
    for reward in ("world_oracle", "world_judge"):
        d = np.array([learning("diffusion_nft", reward, s, 24) - learning("flow_grpo", reward, s, 90) for s in seeds])
        bound = d.mean() - stats.t.ppf(1 - level, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        (finding,) = [x for x in findings if f"reward={reward})" in x.label]
        assert (f"{d.mean():+.3f} (one-sided {100 * (1 - level):.4g}% bound {bound:+.3f}; margin −0.05) at update 24"
                in finding.effect)
        assert (finding.verdict == "supported") == (bound > -0.05)
