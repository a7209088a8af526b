"""The ledger reads a suite run under a sequential plan as a look of that plan (claims/look.py): the level is
O'Brien-Fleming's spending at the stored seeds, computed here in closed form, and every check and the ledger-wide
reading decide at it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from grpo_bench.errors import UserError
from grpo_bench.report.claims import SUPPORTED, UNDECIDED, Beats, Claim, Finding, evaluate
from grpo_bench.report.claims.look import suite_look
from grpo_bench.suite.run_folder import RESULTS

from .test_claims import _results, _row


def spent(t: float) -> float:
    """Lan-DeMets O'Brien-Fleming: the alpha spent by information fraction t, at 5% overall."""
    return 2 - 2 * stats.norm.cdf(stats.norm.ppf(0.975) / math.sqrt(t))


PLAN = {"decide": {"planned": [3, 6, 9, 12]}}


def test_a_planned_look_is_read_at_the_level_the_plan_spends_there():
    look = suite_look(PLAN, [1000, 1001, 1002, 1003, 1004, 1005], "x")
    assert look.look == 2 and look.seeds == 6
    assert look.level == pytest.approx(spent(6 / 12) - spent(3 / 12), rel=1e-12)
    assert look.level == pytest.approx(0.005486, abs=1e-6)  # the level `run --until-decided` stored for look 2
    first = suite_look(PLAN, [0, 1, 2], "x")
    assert first.look == 1 and first.level == pytest.approx(spent(0.25), rel=1e-12)
    last = suite_look(PLAN, range(12), "x")
    assert last.look == 4 and last.level == pytest.approx(spent(1.0) - spent(0.75), rel=1e-12)
    assert "look 2 of 4 (6 seeds)" in look.text


def test_a_look_in_progress_spends_from_the_last_planned_look_below_it():
    look = suite_look(PLAN, range(7), "x")
    assert look.look == 3 and "in progress" in look.text
    assert look.level == pytest.approx(spent(7 / 12) - spent(6 / 12), rel=1e-12)
    assert look.level < suite_look(PLAN, range(9), "x").level  # smaller than the planned look's


def test_no_plan_is_the_nominal_level_and_a_malformed_plan_is_one_line():
    assert suite_look({}, [0, 1, 2], "x") is None
    for bad in ([], [3, 3, 6], [0, 3], "3,6", [3.0, 6.0]):
        with pytest.raises(UserError, match=r"f/results.parquet: key 'decide.planned'"):
            suite_look({"decide": {"planned": bad}}, [0, 1, 2], "f/results.parquet")
    with pytest.raises(UserError, match="more than the plan's last look"):
        suite_look(PLAN, range(13), "x")
    with pytest.raises(UserError, match="key 'decide'"):
        suite_look({"decide": [3, 6]}, [0], "x")


def _write(root, rows, info):
    frame = _results(rows)
    suite_row = frame["kind"] == "suite"
    frame.loc[suite_row, "text"] = json.dumps({"name": "synthetic", "report": {}, **info})
    (root / "s").mkdir(parents=True)
    frame.to_parquet(root / "s" / RESULTS, index=False)
    return root


def test_a_sequential_suite_decides_its_checks_at_its_look_level(tmp_path):
    # 5 seeds, paired differences with t = 5.0 on 4 df: two-sided p = 0.0075, below 5% but above the level the
    # plan [5, 10] spends at its first look (spent(0.5) = 0.0056)
    d = np.array([0.10, 0.16, 0.04, 0.12, 0.08])
    p = 2 * stats.t.sf(d.mean() / (d.std(ddof=1) / math.sqrt(5)), 4)
    assert spent(0.5) < p < 0.05
    rows = {"sage_grpo": _row("sage_grpo", 0.2 + d), "flow_grpo": _row("flow_grpo", [0.2] * 5)}
    claim = Claim("k", "sage beats flow", "s", (Beats(row={"method": "sage_grpo"}, versus=({"method": "flow_grpo"},)),))
    assert evaluate(claim, _write(tmp_path / "a", rows, {})).verdict == SUPPORTED  # no plan: 5%
    v = evaluate(claim, _write(tmp_path / "b", rows, {"decide": {"planned": [5, 10]}}))
    (finding,) = v.checks[0][2]
    assert v.verdict == UNDECIDED and finding.level == pytest.approx(spent(0.5), rel=1e-12)
    assert "level 0.0056" in finding.effect
    assert evaluate(claim, _write(tmp_path / "c", rows, {"decide": {"planned": [5]}})).verdict == SUPPORTED  # its end


def test_the_ledger_wide_reading_keeps_each_tests_level():
    from grpo_bench.report.claims.rendering import ledger_wide
    from grpo_bench.report.claims.verdicts import Verdict

    check = Beats(row={})
    found = [Finding("x", SUPPORTED, "", p=0.004, toward=1, level=0.05),
             Finding("y", UNDECIDED, "", p=0.004, toward=1, level=0.0055)]
    verdicts = [Verdict(Claim(str(i), "c", "s", ()), f.verdict, "", "", [(check, f.verdict, [f])])
                for i, f in enumerate(found)]
    # Holm over 2: 0.008 for both; below 5%, above 0.0055
    assert ledger_wide(verdicts) == ([SUPPORTED, UNDECIDED], 2)
