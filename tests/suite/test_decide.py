"""`run --until-decided`: the per-look decision on synthetic differences (closed-form levels and
intervals), the suite's decide block, the cells of added seeds, and the look loop on a fake trainer."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from decide_support import run_decided
from rich.console import Console
from scipy import stats
from suite_support import SMALL_SUITE, write_suite

from grpo_bench.cli.decide import DECIDE_FILE, run_until_decided, seeds_at
from grpo_bench.errors import UserError
from grpo_bench.report.power import spending
from grpo_bench.report.sequential import EFFECT, OPEN, PRECISE, decide_look, planned_looks
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite, parse_suite
from grpo_bench.suite.results import read_table

PLANNED = [3, 6, 9, 12]
ALPHA = 0.05


def _level(look: int, planned=PLANNED, alpha=ALPHA) -> float:
    """The newly spent O'Brien-Fleming alpha at a look, written out independently of look_levels."""
    z = stats.norm.ppf(1 - alpha / 2)
    spent = [2 - 2 * stats.norm.cdf(z / math.sqrt(n / planned[-1])) for n in planned]
    return spent[look - 1] - (spent[look - 2] if look > 1 else 0.0)


def test_planned_looks_end_at_max_seeds():
    assert planned_looks(3, 3, 12) == [3, 6, 9, 12]
    assert planned_looks(3, 4, 12) == [3, 7, 11, 12]
    assert planned_looks(12, 3, 12) == [12]
    levels = [_level(k) for k in range(1, 5)]
    assert sum(levels) == pytest.approx(ALPHA) and levels[0] == pytest.approx(spending(0.25))
    assert levels == sorted(levels)  # O'Brien-Fleming: almost nothing spent early


def test_large_true_effect_is_decided_at_look_1():
    d = [1.0, 1.01, 0.99]
    out = decide_look({"big": d}, 0.05, 1, PLANNED)
    half = stats.t.ppf(1 - _level(1) / 2, 2) * np.std(d, ddof=1) / math.sqrt(3)
    assert out["big"].verdict == EFFECT
    assert out["big"].level == pytest.approx(_level(1))
    assert out["big"].half == pytest.approx(half) and half < 1.0  # the interval at the look's level excludes 0
    assert out["big"].p_holm == pytest.approx(stats.ttest_1samp(d, 0).pvalue)


def test_zero_effect_with_tiny_noise_is_decided_by_the_half_width():
    d = [1e-4, -1e-4, 3e-5]
    out = decide_look({"null": d}, 0.05, 1, PLANNED)["null"]
    assert out.verdict == PRECISE
    assert out.p_holm > _level(1) and out.half < 0.05
    # the same spread against a smaller minimum effect is not precise enough
    assert decide_look({"null": d}, out.half / 2, 1, PLANNED)["null"].verdict == OPEN


def test_zero_effect_with_big_noise_stays_open_to_max_seeds():
    rng = np.random.default_rng(0)
    d = rng.normal(0.0, 1.0, 12)
    for look, n in enumerate(PLANNED, start=1):
        out = decide_look({"noisy": d[:n]}, 0.05, look, PLANNED)["noisy"]
        assert out.verdict == OPEN and out.n == n
        assert out.half > 0.05 and out.level == pytest.approx(_level(look))


def test_holm_makes_a_family_harder_to_decide_than_one_comparison():
    """Two copies of a comparison whose p lies between level/2 and level: alone it is decided, as a
    family of two Holm doubles both p-values past the level."""
    level, n = _level(4), 12
    t = stats.t.isf(0.75 * level / 2, n - 1)  # two-sided p = 0.75 level
    z = np.resize([1.0, -1.0], n)
    z = (z - z.mean()) / z.std(ddof=1)
    d = list(1.0 + z * math.sqrt(n) / t)  # mean 1, sd sqrt(n)/t: t-statistic exactly t
    assert stats.ttest_1samp(d, 0).pvalue == pytest.approx(0.75 * level)
    assert decide_look({"a": d}, 1e-9, 4, PLANNED)["a"].verdict == EFFECT
    pair = decide_look({"a": d, "b": d}, 1e-9, 4, PLANNED)
    assert [v.verdict for v in pair.values()] == [OPEN, OPEN]


def test_fewer_than_two_seeds_is_open():
    out = decide_look({"one": [5.0], "none": []}, 0.05, 1, [1, 4])
    assert out["one"].verdict == out["none"].verdict == OPEN


# --- the suite's decide block ---------------------------------------------------------------------
@pytest.mark.parametrize("block,needle", [
    ({"max_seed": 4}, "unknown decide key 'max_seed' (did you mean 'max_seeds'?); allowed: alpha, block, max_seeds"),
    ({"max_seeds": 1}, "decide.max_seeds must be an integer in 2..1000"),
    ({"max_seeds": 4.5}, "decide.max_seeds must be an integer >= 1, got 4.5"),
    ({"block": 0}, "decide.block must be an integer >= 1, got 0"),
    ({"alpha": 1.5}, "decide.alpha must be a number strictly between 0 and 1, got 1.5"),
    ({"alpha": True}, "decide.alpha must be a number strictly between 0 and 1"),
    ([3], "decide must be a mapping"),
])
def test_bad_decide_blocks_name_file_key_and_allowed_values(block, needle):
    with pytest.raises(UserError) as exc:
        parse_suite({**SMALL_SUITE, "decide": block}, "suites/x.yaml")
    assert str(exc.value).startswith("suites/x.yaml: ") and needle in str(exc.value)


def test_max_seeds_below_the_listed_seeds_is_refused():
    with pytest.raises(UserError, match=r"decide.max_seeds must be an integer in 3..1000 \(at least the 3 listed"):
        parse_suite({**SMALL_SUITE, "seeds": [0, 1, 2], "decide": {"max_seeds": 2}}, "s.yaml")


def test_decide_block_defaults_and_round_trip():
    suite = parse_suite({**SMALL_SUITE, "decide": {"max_seeds": 8}}, "s.yaml")
    assert (suite.decide.max_seeds, suite.decide.block, suite.decide.alpha) == (8, 3, 0.05)
    import yaml

    assert parse_suite(yaml.safe_load(suite.to_yaml()), "again.yaml").decide == suite.decide


def test_added_seeds_give_exactly_the_cells_of_a_longer_seed_list(tmp_path):
    assert seeds_at([0, 5], 4) == [0, 5, 6, 7]
    suite = parse_suite({**SMALL_SUITE, "seeds": [0, 5], "decide": {"max_seeds": 4, "block": 2}}, "s.yaml")
    explicit = parse_suite({**SMALL_SUITE, "seeds": [0, 5, 6, 7]}, "t.yaml")
    import dataclasses

    grown = expand(dataclasses.replace(suite, seeds=seeds_at(suite.seeds, 4)))
    assert [(c.id, c.group, c.labels) for c in grown] == [(c.id, c.group, c.labels) for c in expand(explicit)]


# --- the look loop on a fake trainer ----------------------------------------------------------------
def _suite(tmp_path, seeds, decide):
    data = {"name": "dec", "base": {"updates": 2, "eval_every": 1, "steps": 4, "eval_samples": 1},
            "grid": {"setting": ["A"], "method": ["dance_grpo", "sage_grpo"]}, "seeds": seeds,
            "report": {"tables": ["power"], "figures": [], "baseline": {"method": "dance_grpo"}}, "decide": decide}
    return load_suite(write_suite(tmp_path / "dec.yaml", data))


def test_a_large_effect_stops_at_look_1(tmp_path, monkeypatch):
    monkeypatch.setenv("DECIDE_EFFECT", "1.0")
    monkeypatch.setenv("DECIDE_NOISE", "0.001")
    code, printed = run_decided(_suite(tmp_path, [0, 1, 2], {"max_seeds": 12, "block": 3}), tmp_path / "runs")
    assert code == 0, printed
    record = json.loads((tmp_path / "runs" / "dec" / DECIDE_FILE).read_text())
    assert record["stopped"] == {"look": 1, "n": 3, "reason": "decided"}
    assert {c["verdict"] for c in record["looks"][0]["comparisons"]} == {EFFECT}
    assert len(record["looks"][0]["comparisons"]) == 8  # sage vs dance x the 8 headline columns
    assert "look 1 of 4: 3 seeds (0..2), level" in printed and "8 of 8 comparisons decided (8 effect" in printed
    seeds = read_table(tmp_path / "runs" / "dec" / "results.parquet")["seed"].dropna().unique()
    assert sorted(seeds) == [0, 1, 2]  # no seed was added


def test_noise_runs_to_max_seeds_and_a_killed_run_resumes_from_its_looks(tmp_path, monkeypatch):
    monkeypatch.setenv("DECIDE_NOISE", "1.0")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    suite = _suite(tmp_path, [0, 1], {"max_seeds": 4, "block": 1, "alpha": 0.05})
    out = tmp_path / "runs"
    code, printed = run_decided(suite, out)
    assert code == 0, printed
    folder = out / "dec"
    record = json.loads((folder / DECIDE_FILE).read_text())
    assert record["stopped"] == {"look": 3, "n": 4, "reason": "max_seeds"}
    assert [lk["seeds"] for lk in record["looks"]] == [[0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert record["levels"] == pytest.approx([_level(k, [2, 3, 4]) for k in (1, 2, 3)])
    assert [lk["level"] for lk in record["looks"]] == record["levels"]
    assert all(any(c["verdict"] == OPEN for c in lk["comparisons"]) for lk in record["looks"])
    assert [ln.split(":")[0] for ln in printed.splitlines() if ln.startswith("look ")] == \
        ["look 1 of 3", "look 2 of 3", "look 3 of 3"]
    # the cell folders are those of the explicit seed list 0..3
    explicit = {c.id for c in expand(parse_suite(_explicit(suite, [0, 1, 2, 3]), "e.yaml"))}
    assert {p.name for p in folder.iterdir() if (p / "cell.json").is_file()} == explicit
    report = (folder / "report" / "report.md").read_text()
    assert "O'Brien-Fleming" in report and "stopped at look 3 (4 seeds)" in report and "| sequential |" in report
    # a comparison decided at an earlier look stays decided, with that look; the others are unchanged
    from grpo_bench.report.sequential import evaluate_look

    frame = read_table(folder / "results.parquet")
    fresh = evaluate_look(frame, {"method": "dance_grpo"}, None, 3, [2, 3, 4])
    assert fresh == record["looks"][-1]["comparisons"] and fresh[0]["verdict"] == OPEN
    kept = evaluate_look(frame, {"method": "dance_grpo"}, None, 3, [2, 3, 4],
                         previous=[{**fresh[0], "verdict": EFFECT, "since": 1}])
    assert (kept[0]["verdict"], kept[0]["since"]) == (EFFECT, 1) and kept[1:] == fresh[1:]
    # killed during look 3: the stored looks 1-2 are kept, look 2 is re-evaluated, nothing is retrained
    starts = (tmp_path / "log").read_text().count("start")
    record["looks"], record["stopped"] = record["looks"][:2], None
    (folder / DECIDE_FILE).write_text(json.dumps(record))
    code, printed = run_decided(suite, out)
    assert code == 0 and (tmp_path / "log").read_text().count("start") == starts == 8
    assert [ln.split(":")[0] for ln in printed.splitlines() if ln.startswith("look ")] == ["look 2 of 3", "look 3 of 3"]
    assert json.loads((folder / DECIDE_FILE).read_text())["stopped"]["look"] == 3
    # another plan for the same folder is refused, before any work
    with pytest.raises(UserError, match="planned with other values"):
        run_decided(_suite(tmp_path, [0, 1], {"max_seeds": 6, "block": 1}), out)


def test_stop_at_look_pauses_undecided_and_a_rerun_continues_at_the_plans_levels(tmp_path, monkeypatch):
    monkeypatch.setenv("DECIDE_NOISE", "1.0")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    suite = _suite(tmp_path, [0, 1], {"max_seeds": 4, "block": 1, "alpha": 0.05})
    out, buf = tmp_path / "runs", io.StringIO()
    code = run_until_decided(suite, out, 1, "local", False, True, Console(file=buf, width=200),
                             trainer="decide_support:effect_train", stop_at_look=2)
    printed = buf.getvalue()
    assert code == 0 and "paused after look 2 (--stop-at-look), not decided" in printed, printed
    record = json.loads((out / "dec" / DECIDE_FILE).read_text())
    assert record["stopped"] is None and [lk["n"] for lk in record["looks"]] == [2, 3]
    assert record["levels"] == pytest.approx([_level(k, [2, 3, 4]) for k in (1, 2, 3)])  # the plan's, not 2 looks'
    assert sorted(read_table(out / "dec" / "results.parquet")["seed"].dropna().unique()) == [0, 1, 2]
    assert "Seeding has not stopped yet" in (out / "dec" / "report" / "report.md").read_text()
    starts = (tmp_path / "log").read_text().count("start")
    code, printed = run_decided(suite, out)  # continues: look 2 re-aggregated, only seed 3 trained
    assert code == 0 and (tmp_path / "log").read_text().count("start") == starts + 2
    assert json.loads((out / "dec" / DECIDE_FILE).read_text())["stopped"] == {"look": 3, "n": 4, "reason": "max_seeds"}
    with pytest.raises(UserError, match=r"--stop-at-look 5: .* plans looks 1..3"):
        run_until_decided(suite, out, 1, "local", False, True, Console(file=io.StringIO()), stop_at_look=5)


def _explicit(suite, seeds):
    import yaml

    data = yaml.safe_load(suite.to_yaml())
    data.pop("decide")
    return {**data, "seeds": seeds}


def test_until_decided_without_a_decide_block_or_baseline_is_one_clear_error(tmp_path):
    data = {**SMALL_SUITE}
    with pytest.raises(UserError, match="--until-decided needs a decide block"):
        run_decided(load_suite(write_suite(tmp_path / "a.yaml", data)), tmp_path / "runs")
    data = {**SMALL_SUITE, "report": {"tables": ["power"]}, "decide": {"max_seeds": 4}}
    with pytest.raises(UserError, match="report.baseline"):
        run_decided(load_suite(write_suite(tmp_path / "b.yaml", data)), tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_failed_cell_stops_the_looks_without_deciding(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "sage_grpo")
    code, printed = run_decided(_suite(tmp_path, [0, 1], {"max_seeds": 4, "block": 1}), tmp_path / "runs")
    assert code == 1 and "look 1: 2 cell(s) failed; nothing decided" in printed
    assert not (tmp_path / "runs" / "dec" / DECIDE_FILE).exists()
    assert (tmp_path / "runs" / "dec" / "report" / "report.md").is_file()

