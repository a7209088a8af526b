"""The claims ledger: verdicts on small synthetic results with known answers, and the command end to end
on copies of stored reports."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.errors import UserError
from grpo_bench.report.claims import (
    CLAIMS,
    CONTRADICTED,
    NOT_TESTED,
    SUPPORTED,
    UNDECIDED,
    Beats,
    Claim,
    Finding,
    Moves,
    Samplers,
    Spread,
    WinRates,
    combine,
    evaluate,
    ledger,
)
from grpo_bench.report.claims.finding import VERDICTS
from grpo_bench.report.power import seeds_needed
from grpo_bench.suite.results import COLUMNS
from grpo_bench.suite.run_folder import RESULTS

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [0, 1, 2, 3, 4]


def _results(rows: dict[str, dict]) -> pd.DataFrame:
    """results.parquet of groups -> {config, oracle: per-seed learning, judge: ..., grad: per-step norms}.

    Setting A weighs the oracle dimensions 1 : 1 : 1, so each dimension carries a third of the learning."""
    out = [{"suite": "synthetic", "kind": "suite", "text": json.dumps({"name": "synthetic", "report": {}})}]
    for group, spec in rows.items():
        cfg = {"setting": "A", "reward": "world_judge", **spec["config"]}
        for i, seed in enumerate(SEEDS):
            cell = f"{group.replace(' ', '_')}-{seed}"
            base = {"suite": "synthetic", "cell": cell, "group": group, "setting": "A", "seed": seed,
                    "method": cfg.get("method", "sage_grpo"), "kl": cfg.get("kl", "none"), "equalizer": False}
            code = {k: spec[k] for k in ("git_commit", "precision") if k in spec}
            out.append({**base, "kind": "cell", "metric": "wall_time", "value": 1.0,
                        "text": json.dumps({"labels": {}, "config": {**cfg, "seed": seed}, "status": "done",
                                            **code})})
            for update, scale in ((0, 0.0), (10, 1.0)):
                for dim in ("vq", "mq", "ta"):
                    out.append({**base, "kind": "update", "update": update, "metric": f"eval_oracle_{dim}",
                                "value": 0.5 + scale * spec["oracle"][i] / 3})
                if "judge" in spec:
                    out.append({**base, "kind": "update", "update": update, "metric": "eval_reward",
                                "value": scale * spec["judge"][i]})
            if "grad" in spec:
                out.append({**base, "kind": "grad", "update": 0, "metric": "grad_norm_per_step",
                            "array": [float(x) * (1 + 0.01 * seed) ** k for k, x in enumerate(spec["grad"])]})
    frame = pd.DataFrame(out, columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def _write(root: Path, name: str, rows: dict[str, dict]) -> Path:
    (root / name).mkdir(parents=True)
    _results(rows).to_parquet(root / name / RESULTS, index=False)
    return root


def _row(method: str, oracle, **kw) -> dict:
    return {"config": {"method": method, **kw.pop("config", {})}, "oracle": list(oracle), **kw}


def test_beats_supported_contradicted_and_undecided_on_known_answers(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.normal(0.0, 0.05, size=5)
    rows = {
        "sage_grpo": _row("sage_grpo", base + 0.30),
        "worse_by_far": _row("flow_grpo", base + np.array([0.01, -0.01, 0.0, 0.005, -0.005])),  # sage +0.30: decided
        "same": _row("cps", base + 0.30 + np.array([0.002, -0.002, 0.001, -0.001, 0.0])),      # equivalent
        "noisy": _row("dance_grpo", base + 0.30 + np.array([0.3, -0.3, 0.2, -0.25, 0.1])),    # open
        "better": _row("other", base + 0.60 + np.array([0.01, -0.01, 0.0, 0.005, -0.005])),  # sage decided worse
    }
    root = _write(tmp_path, "s", rows)

    def verdict(*rivals: str) -> tuple[str, list]:
        claim = Claim("k", "sage is best", "s", (Beats(row={"method": "sage_grpo"},
                                                       versus=tuple({"method": r} for r in rivals)),))
        v = evaluate(claim, root)
        return v.verdict, v

    assert verdict("flow_grpo")[0] == SUPPORTED
    assert verdict("other")[0] == CONTRADICTED  # decided the other way
    result, v = verdict("cps")
    assert result == CONTRADICTED and "equivalent to 0 within ±0.05" in v.effect  # no gain of the size that matters
    result, v = verdict("flow_grpo", "dance_grpo")
    assert result == UNDECIDED  # one decided, one open: not yet supported
    open_finding = next(f for f in v.checks[0][2] if f.verdict == UNDECIDED)
    d = -np.array([0.3, -0.3, 0.2, -0.25, 0.1])
    assert open_finding.needed == seeds_needed(0.05, d.std(ddof=1), alpha=0.05 / 2)  # level 5% / 2 comparisons
    assert v.needed == f"{open_finding.needed} seeds"
    assert verdict("flow_grpo", "dance_grpo", "cps")[0] == CONTRADICTED  # one contradiction decides


def test_moves_and_spread_checks_on_known_answers(tmp_path):
    rows = {
        "none": _row("sage_grpo", [-0.2, -0.22, -0.18, -0.21, -0.19], judge=[0.8, 0.9, 1.0, 0.85, 0.95],
                     config={"kl": "none", "equalizer": False}, grad=[1.0, 20.0, 40.0, math.nan]),
        "on": _row("sage_grpo", [0.0, 0.01, -0.01, 0.0, 0.0], judge=[0.6, -0.5, 0.4, -0.3, 0.1],
                   config={"kl": "dual", "equalizer": True}, grad=[1.0, 1.1, 1.2, math.nan]),
    }
    root = _write(tmp_path, "s", rows)
    hacked = Claim("h", "hacked", "s", (Moves(row={"kl": "none"}, metric="Judge", direction=+1),
                                         Moves(row={"kl": "none"}, metric="Oracle", direction=-1)))
    assert evaluate(hacked, root).verdict == SUPPORTED
    assert evaluate(Claim("h", "x", "s", (Moves(row={"kl": "dual"}, metric="Oracle", direction=-1),)),
                    root).verdict == CONTRADICTED  # +0.00 ± 0.01: equivalent to no change
    assert evaluate(Claim("h", "x", "s", (Moves(row={"kl": "dual"}, metric="Judge", direction=+1),)),
                    root).verdict == UNDECIDED
    spread = Claim("e", "spread", "s", (Spread(row={"equalizer": False}, bound=10.0, below=False),
                                        Spread(row={"equalizer": True}, bound=2.0, below=True)))
    v = evaluate(spread, root)
    assert v.verdict == SUPPORTED
    off = v.checks[0][2][0]
    # per seed max / min = 40 (1 + 0.01 seed)^2 (the NaN step ignored); the geometric mean over the 5 seeds
    expected = 40 * math.exp(np.mean([2 * math.log(1 + 0.01 * s) for s in SEEDS]))
    assert off.effect.startswith(f"{expected:.1f}×") and "5 seeds" in off.effect
    assert evaluate(Claim("e", "x", "s", (Spread(row={"equalizer": True}, bound=1.1, below=True),)),
                    root).verdict == CONTRADICTED  # 1.2x is above 1.1x on every seed


def test_combine_every_and_some():
    assert combine([SUPPORTED, SUPPORTED]) == SUPPORTED
    assert combine([SUPPORTED, UNDECIDED]) == UNDECIDED
    assert combine([UNDECIDED, CONTRADICTED]) == CONTRADICTED
    assert combine([CONTRADICTED, SUPPORTED], "some") == SUPPORTED
    assert combine([CONTRADICTED, UNDECIDED], "some") == UNDECIDED
    assert combine([CONTRADICTED, CONTRADICTED], "some") == CONTRADICTED
    assert combine([]) == UNDECIDED
    assert combine([SUPPORTED, "not tested"]) == "not tested"  # "every" cannot hold with a named row missing
    assert combine(["not tested", CONTRADICTED]) == CONTRADICTED
    assert combine([SUPPORTED, "depends on the reference"]) == "depends on the reference"


def test_samplers_and_win_rate_checks_read_their_stored_files(tmp_path):
    block = tmp_path / "samplers" / "matched_0.5_T10"
    block.mkdir(parents=True)
    (block / "table1.md").write_text("Table 1 — ... (T = 10, shift = 3, data std s = 0.5, every kernel at noise "
                                     "level 0.5).\n")
    pd.DataFrame({"kernel": ["ode", "flow (flow_grpo, 0.5)", "sage (sage_grpo, 0.5)"], "noise_energy": [0, 1.0, 1.2],
                  "excess_final_var_err": [0.0, 0.10, -0.12], "final_var_err": [-0.3, -0.2, -0.42]}
                 ).to_csv(block / "table1.csv", index=False)
    claim = Claim("t1", "less excess noise", "samplers", (Samplers(kernel="sage", than="flow"),))
    v = evaluate(claim, tmp_path)
    # |excess| and |error against the data| both compared, at T = 10 level 0.5: both larger for sage
    assert v.verdict == CONTRADICTED and "vs ODE 0.1200 vs 0.1000; vs data 0.4200 vs 0.2000" in v.effect
    frame = pd.read_csv(block / "table1.csv")
    frame.loc[2, "excess_final_var_err"] = 0.05  # less excess noise than flow, but farther from the data
    frame.to_csv(block / "table1.csv", index=False)
    v = evaluate(claim, tmp_path)
    assert v.verdict == "depends on the reference" and "vs ODE 0.0500 vs 0.1000; vs data 0.4200 vs 0.2000" in v.effect
    study = Claim("u", "raters prefer sage", "main_table", (WinRates(target="sage_grpo"),))
    v = evaluate(study, tmp_path)
    assert v.verdict == UNDECIDED and "human study" in v.needed  # no votes stored
    kit = tmp_path / "kits" / "k1" / "analysis"
    kit.mkdir(parents=True)
    pd.DataFrame({"target": ["sage_grpo kl=dual"] * 2, "baseline": ["flow", "dance"], "dimension": ["vq", "vq"],
                  "rate": [0.7, 0.65], "ci_low": [0.6, 0.55], "ci_high": [0.8, 0.75], "votes": [200, 200]}
                 ).to_csv(kit / "table3.csv", index=False)
    assert evaluate(study, tmp_path).verdict == SUPPORTED


def test_a_missing_suite_leaves_its_claims_not_tested(tmp_path):
    v = evaluate(CLAIMS[0], tmp_path)
    assert v.verdict == "not tested" and "not found" in v.effect and "suites/main_table.yaml" in v.needed


def test_the_registry_is_declarative_data():
    assert len({c.key for c in CLAIMS}) == len(CLAIMS) == 10
    assert all(c.checks and all(hasattr(k, "findings") and hasattr(k, "what") for k in c.checks) for c in CLAIMS)


def test_claims_command_end_to_end_on_copies_of_stored_reports(tmp_path):
    reports = tmp_path / "reports"
    for name in ("ablate_kl", "kl_weight"):
        (reports / name).mkdir(parents=True)
        shutil.copy(ROOT / "reports" / name / RESULTS, reports / name / RESULTS)
    shutil.copytree(ROOT / "reports" / "samplers", reports / "samplers")
    result = CliRunner().invoke(app, ["claims", str(reports)])
    assert result.exit_code == 0, result.output
    assert "10" in result.output and "CLAIMS.md" in result.output
    text = (reports / "CLAIMS.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(table) == 10
    _, verdicts = ledger(reports)
    by_key = {v.claim.key: v for v in verdicts}
    # main_table and ablate_equalizer were not copied: their claims are not tested, not guessed
    assert by_key["table2_B"].verdict == "not tested" and "not found" in by_key["table2_B"].effect
    assert by_key["equalizer"].verdict == "not tested"
    # the stored ablate_kl is read (its verdict rests on its comparisons, whatever a re-run made them), and
    # the rendered table says what the ledger computed, row by row
    dual = by_key["dual_kl"]
    assert "kl=" in dual.effect
    assert {f.label.split(" − ")[1].split(" lr=")[0] for f in dual.checks[0][2]} >= {"sage_grpo kl=none"}
    assert "no tuned.json beside the results" in dual.effect  # copied without it: not read as tuned
    assert [f"**{v.verdict}**" in row for v, row in zip(verdicts, table)] == [True] * 10
    assert by_key["mixgrpo_speed"].verdict == NOT_TESTED  # the field suite's cells are not there
    # exact Table 1 blocks at matched noise: less excess noise than flow over the ODE, not closer to the data at T = 50
    assert by_key["table1_noise"].verdict == "depends on the reference"
    assert by_key["user_study"].verdict == UNDECIDED
    # a file is not a reports folder: one line, exit 2
    bad = CliRunner().invoke(app, ["claims", str(reports / "CLAIMS.md")])
    assert isinstance(bad.exception, UserError) and "not a folder" in str(bad.exception)


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.key for c in CLAIMS])
def test_every_registered_claim_renders_on_the_stored_reports(claim):
    v = evaluate(claim, ROOT / "reports")
    assert v.verdict in VERDICTS and v.effect


def test_a_claim_names_its_row_and_no_other_row_stands_in(tmp_path):
    """Claim 1's old fallback read the kl=fixed row for "SAGE-GRPO with dual KL": now that is *not tested*."""
    rows = {"sage_grpo kl=fixed": _row("sage_grpo", np.full(5, 0.3) + np.arange(5) * 0.01, config={"kl": "fixed"}),
            "flow_grpo kl=fixed": _row("flow_grpo", np.zeros(5) + np.arange(5) * 0.011, config={"kl": "fixed"})}
    root = _write(tmp_path, "s", rows)
    claim = Claim("k", "sage dual is best", "s", (Beats(row={"method": "sage_grpo", "kl": "dual"},
                                                        versus=({"method": "flow_grpo"},)),), tested_by="suites/x.yaml")
    v = evaluate(claim, root)
    assert v.verdict == "not tested" and "no such row" in v.effect and v.needed == "a run of `suites/x.yaml`"
    # the same data with the row present decides it
    fixed = Claim("k", "sage fixed is best", "s", (Beats(row={"method": "sage_grpo", "kl": "fixed"},
                                                         versus=({"method": "flow_grpo"},)),))
    assert evaluate(fixed, root).verdict == SUPPORTED


def test_a_pair_of_rows_on_different_code_is_not_decided_unless_fingerprints_match(tmp_path):
    noise = np.array([0.01, -0.01, 0.0, 0.005, -0.005])
    rows = {"a": _row("sage_grpo", 0.3 + noise, git_commit="1111111111aa", precision="bf16"),
            "b": _row("flow_grpo", 0.0 + noise, git_commit="2222222222bb", precision="bf16")}
    root = _write(tmp_path, "s", rows)
    claim = Claim("k", "a beats b", "s", (Beats(row={"method": "sage_grpo"}, versus=({"method": "flow_grpo"},)),))
    v = evaluate(claim, root)
    assert v.verdict == UNDECIDED and "different code (1111111111/bf16, 2222222222/bf16)" in v.effect
    assert "re-run of `s` on one commit" in v.needed
    (root / "fingerprints.json").write_text(json.dumps({"1111111111aa": "h", "2222222222bb": "h"}))
    assert evaluate(claim, root).verdict == SUPPORTED  # shown identical: they pair
    (root / "fingerprints.json").write_text(json.dumps({"1111111111aa": "h", "2222222222bb": "other"}))
    assert evaluate(claim, root).verdict == UNDECIDED


def test_a_mismatched_equalizer_row_is_a_labelled_ablation_the_claim_does_not_read(tmp_path):
    """Release 0.4's CPS cells with the equalizer ran the Gaussian proxy on the unscaled log-prob."""
    cps_on = {"equalizer": True, "logprob": "unscaled", "equalizer_proxy": "gaussian"}
    rows = {"cps on": _row("cps", np.full(5, 0.5) + np.arange(5) * 0.01, config=cps_on),
            "cps off": _row("cps", np.arange(5) * 0.012, config={"equalizer": False, "logprob": "unscaled"})}
    root = _write(tmp_path, "s", rows)
    claim = Claim("k", "the equalizer helps", "s", (Beats(row={"equalizer": True}, versus=({"equalizer": False},),
                                                          split=("method",)),))
    v = evaluate(claim, root)
    assert v.verdict == "not tested" and "labelled ablation row" in v.effect
    mismatched = {"equalizer": True, "equalizer_proxy": "mismatched_gaussian"}
    named = Claim("k", "the mismatch helps", "s", (Beats(row=mismatched, versus=({"equalizer": False},),
                                                         split=("method",)),))
    assert evaluate(named, root).verdict == SUPPORTED  # read only where a check names it


def test_a_labelled_ablation_row_beside_the_named_row_leaves_the_verdict_to_the_named_row(tmp_path):
    """The stored ablate_equalizer: CPS with the equalizer on (its own proxy) and the labelled mismatched row."""
    on = {"equalizer": True, "logprob": "unscaled", "equalizer_proxy": "logprob"}
    mismatched = {**on, "equalizer_proxy": "mismatched_gaussian"}
    rows = {"cps equalizer=on": _row("cps", np.full(5, 0.5) + np.arange(5) * 0.01, config=on),
            "cps equalizer=on equalizer_proxy=mismatched_gaussian": _row("cps", np.arange(5) * -0.01,
                                                                       config=mismatched),
            "cps equalizer=off": _row("cps", np.arange(5) * 0.012, config={"equalizer": False,
                                                                           "logprob": "unscaled"})}
    root = _write(tmp_path, "s", rows)
    claim = Claim("k", "the equalizer helps", "s", (Beats(row={"equalizer": True}, versus=({"equalizer": False},),
                                                          split=("method",)),))
    v = evaluate(claim, root)
    assert v.verdict == SUPPORTED and "labelled ablation" not in v.effect  # the named row decides, not the label
    # without the named row the labelled one still does not stand in for it
    del rows["cps equalizer=on"]
    assert evaluate(claim, _write(tmp_path / "b", "s", rows)).verdict == NOT_TESTED


def test_the_ledger_wide_holm_reading_corrects_all_tests_together():
    from grpo_bench.report.claims.rendering import ledger_wide
    from grpo_bench.report.claims.verdicts import Verdict

    def finding(p: float) -> Finding:
        return Finding("x", SUPPORTED if p < 0.05 else UNDECIDED, "", p=p, toward=1, p_equivalent=1.0)

    claims = [Claim(str(i), "c", "s", ()) for i in range(3)]
    check = Beats(row={})
    # per check each p is alone (its own family): 0.02 and 0.03 are supported; over the ledger's 3 tests, Holm
    # multiplies the smallest by 3, the next by 2: 0.01 * 3 = 0.03 < 0.05 stays, 0.02 * 2 = 0.04 stays, 0.03 * 1 ...
    verdicts = [Verdict(c, SUPPORTED, "", "", [(check, SUPPORTED, [finding(p)])]) for c, p in zip(claims, [0.01, 0.02,
                                                                                                       0.04])]
    wide, n = ledger_wide(verdicts)
    assert n == 3 and wide == [SUPPORTED, SUPPORTED, SUPPORTED]  # 0.03, 0.04, 0.04: monotone Holm, all below 5%
    verdicts[2].checks[0][2][0].p = 0.045
    verdicts[1].checks[0][2][0].p = 0.03
    wide, _ = ledger_wide(verdicts)
    assert wide == [SUPPORTED, UNDECIDED, UNDECIDED]  # 0.03, max(0.06, ...) -> the other two are no longer decided
