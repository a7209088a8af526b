"""The ledger reads what it names (issue 40, item 3): a dirty-tree cell counts only where its behaviour was
fingerprinted (the whole commit string compared, a fingerprint being a (commit, CPU) fact); a claim's row that ran
at another lr than its own tuned choice, untuned, or on development seeds gets *not tested as named*, never
supported or contradicted. Small synthetic stored tables with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.errors import UserError
from grpo_bench.report.claims import SUPPORTED, Beats, Claim, Moves, evaluate, ledger
from grpo_bench.report.claims.as_named import TUNED_ON_TEST_SEEDS
from grpo_bench.report.claims.finding import NOT_AS_NAMED, NOT_VERIFIED
from grpo_bench.report.claims.provenance import LEGACY_CPU, read_fingerprints, record
from grpo_bench.suite.results import COLUMNS
from grpo_bench.suite.run_folder import RESULTS

TEST_SEEDS = [1000, 1001, 1002, 1003, 1004]
NOISE = np.array([0.01, -0.01, 0.0, 0.005, -0.005])
CLEAN = "a" * 40
AMD = f"{LEGACY_CPU}, 2 CPUs, no GPU, torch 2.13.0+cpu, Linux"
INTEL = "Intel(R) Xeon(R) Processor, 2 CPUs, no GPU, torch 2.13.0+cpu, Linux"


def _row(method: str, oracle, labels=None, seeds=TEST_SEEDS, commit=CLEAN, machine=AMD, **config) -> dict:
    return {"config": {"method": method, "lr": 3e-5, **config}, "oracle": list(oracle), "seeds": seeds,
            "labels": {"method": method, "lr": config.get("lr", 3e-5), **(labels or {})}, "commit": commit,
            "machine": machine}


def _write(root: Path, rows: dict[str, dict], tuned: dict | None = None, name: str = "s") -> Path:
    """``root/name/results.parquet`` of groups -> per-seed oracle learning (Setting A: a third per dimension), and
    the suite's tuning record ``tuned.json`` ({row: chosen point}) when given."""
    out = [{"suite": name, "kind": "suite", "text": json.dumps({"name": name, "report": {}})}]
    for group, spec in rows.items():
        cfg = {"setting": "A", "reward": "world_oracle", "kl": "fixed", **spec["config"]}
        for seed, learning in zip(spec["seeds"], spec["oracle"]):
            cell = f"{group.replace(' ', '_')}-{seed}"
            base = {"suite": name, "cell": cell, "group": group, "setting": "A", "seed": seed,
                    "method": cfg["method"], "kl": cfg["kl"], "equalizer": False}
            info = {"labels": {**spec["labels"], "seed": seed}, "config": {**cfg, "seed": seed}, "status": "done",
                    "git_commit": spec["commit"], "precision": "bf16", "machine": spec["machine"]}
            out.append({**base, "kind": "cell", "metric": "wall_time", "value": 1.0, "text": json.dumps(info)})
            for update, scale in ((0, 0.0), (10, 1.0)):
                for dim in ("vq", "mq", "ta"):
                    out.append({**base, "kind": "update", "update": update, "metric": f"eval_oracle_{dim}",
                                "value": 0.5 + scale * learning / 3})
    (root / name).mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(out, columns=list(COLUMNS)).astype({k: v for k, v in COLUMNS.items() if v != "object"})
    frame.to_parquet(root / name / RESULTS, index=False)
    if tuned is not None:
        (root / name / "tuned.json").write_text(json.dumps({"methods": {r: {"chosen": c} for r, c in tuned.items()}}))
    return root


def _claim(row: dict, versus: dict, as_named=TUNED_ON_TEST_SEEDS) -> Claim:
    return Claim("k", "row beats rival", "s", (Beats(row=row, versus=(versus,)),), tested_by="suites/s.yaml",
                 as_named=as_named)


TUNED = {"sage_grpo": {"lr": 3e-5}, "flow_grpo": {"lr": 3e-5}}


def test_a_dirty_tree_without_a_fingerprint_is_not_verified_and_its_clean_commit_does_not_stand_in(tmp_path):
    rows = {"sage_grpo": _row("sage_grpo", 0.3 + NOISE, commit=CLEAN + "+dirty"),
            "flow_grpo": _row("flow_grpo", 0.0 + NOISE)}
    root = _write(tmp_path, rows, TUNED)
    claim = _claim({"method": "sage_grpo"}, {"method": "flow_grpo"})
    v = evaluate(claim, root)
    assert v.verdict == NOT_VERIFIED and f"{CLEAN}+dirty" in v.effect and "+0.300" in v.effect  # measured, shown
    assert "clean tree" in v.needed
    # the clean commit's fingerprint says nothing of the dirty tree built on it (ten characters used to match)
    (root / "fingerprints.json").write_text(json.dumps({CLEAN: "f" * 64}))
    assert evaluate(claim, root).verdict == NOT_VERIFIED
    # the dirty tree's own behaviour recorded (its whole string): the cells count, and the pair is decided
    (root / "fingerprints.json").write_text(json.dumps({CLEAN: "f" * 64, CLEAN + "+dirty": {"AMD EPYC": "f" * 64}}))
    assert evaluate(claim, root).verdict == SUPPORTED


def test_two_commits_pair_only_on_fingerprints_taken_on_one_cpu(tmp_path):
    other = "b" * 40
    rows = {"sage_grpo": _row("sage_grpo", 0.3 + NOISE), "flow_grpo": _row("flow_grpo", 0.0 + NOISE, commit=other)}
    root = _write(tmp_path, rows, TUNED)
    claim = _claim({"method": "sage_grpo"}, {"method": "flow_grpo"})
    prints = root / "fingerprints.json"
    prints.write_text(json.dumps({CLEAN: "1" * 64, other: {"Intel(R) Xeon(R) Processor": "1" * 64}}))
    v = evaluate(claim, root)  # equal hashes, but one is AMD's (old schema) and the other Intel's: not like with like
    assert v.verdict == "undecided" and "different code (aaaaaaaaaa/bf16, bbbbbbbbbb/bf16)" in v.effect
    prints.write_text(json.dumps({CLEAN: "1" * 64, other: {"Intel(R) Xeon(R) Processor": "1" * 64,
                                                          LEGACY_CPU: "1" * 64}}))
    assert evaluate(claim, root).verdict == SUPPORTED  # both recorded on the AMD EPYC, equal
    prints.write_text(json.dumps({CLEAN: {LEGACY_CPU: "1" * 64}, other: {LEGACY_CPU: "2" * 64}}))
    assert evaluate(claim, root).verdict == "undecided"


def test_one_commit_on_two_cpus_is_two_behaviours(tmp_path):
    """Float kernels differ between CPUs (measured: an Intel Xeon without bf16 units, bf16 forced, left the AMD
    EPYC's update-0 advantage 0.71296108 at 0.71296126, and its fp32 at 0.70860), so a comparison whose rows ran
    one commit at one precision on two CPUs is not decided; on one CPU it is."""
    rows = {"sage_grpo": _row("sage_grpo", 0.3 + NOISE), "flow_grpo": _row("flow_grpo", 0.0 + NOISE, machine=INTEL)}
    claim = _claim({"method": "sage_grpo"}, {"method": "flow_grpo"})
    v = evaluate(claim, _write(tmp_path / "two", rows, TUNED))
    assert v.verdict == "undecided"
    two = f"aaaaaaaaaa/bf16 on {LEGACY_CPU}, aaaaaaaaaa/bf16 on Intel(R) Xeon(R) Processor"
    assert f"different code ({two})" in v.effect
    rows["flow_grpo"] = _row("flow_grpo", 0.0 + NOISE, machine=INTEL)
    rows["sage_grpo"] = _row("sage_grpo", 0.3 + NOISE, machine=INTEL)
    assert evaluate(claim, _write(tmp_path / "one", rows, TUNED)).verdict == SUPPORTED


def _lines(*rows: str, moved: str = "") -> list[str]:
    """A print of the fingerprint script: one line per row, its hashes derived from the row's name (``moved``: that
    row's checkpoint hash one digit off, as a change in its code would print it)."""
    import hashlib

    return [f"{row} {hashlib.sha256(row.encode()).hexdigest()[:16]} {'0' * 15}{int(row == moved)}" for row in rows]


def test_two_commits_are_one_behaviour_for_the_rows_a_comparison_reads(tmp_path):
    """SAGE-GRPO (dual) ran at one commit, FlowGRPO (fixed) at another; the script printed one row more at the
    second (whole hashes differ). Both rows printed alike at both commits: decided; either of them moved: not."""
    from grpo_bench.report.claims.provenance import record_output

    other = "b" * 40
    rows = {"sage_grpo kl=dual": _row("sage_grpo", 0.3 + NOISE, labels={"kl": "dual"}, kl="dual"),
            "flow_grpo": _row("flow_grpo", 0.0 + NOISE, commit=other)}
    claim = _claim({"method": "sage_grpo"}, {"method": "flow_grpo"}, as_named=None)
    older = _lines("sage_grpo dual", "flow_grpo fixed")

    def verdict(at_other: list[str], at_clean: list[str] = older) -> str:
        root = _write(tmp_path / str(len(list(tmp_path.iterdir()))), rows)
        record_output(root / "fingerprints.json", CLEAN, LEGACY_CPU, at_clean)
        record_output(root / "fingerprints.json", other, LEGACY_CPU, at_other)
        v = evaluate(claim, root)
        return v.verdict + (" (different code)" if "different code (aaaaaaaaaa/bf16, bbbbbbbbbb/bf16)" in v.effect
                            else "")

    newer = ("sage_grpo dual", "flow_grpo fixed", "mix_grpo own")
    assert verdict(_lines(*newer)) == SUPPORTED
    # each commit must print both rows alike: FlowGRPO's row moved, or SAGE-GRPO's (which ran at the other commit)
    assert verdict(_lines(*newer, moved="flow_grpo fixed")) == "undecided (different code)"
    assert verdict(_lines(*newer, moved="sage_grpo dual")) == "undecided (different code)"
    # a row the comparison does not read moved: still one behaviour for it
    assert verdict(_lines(*newer, moved="mix_grpo own")) == SUPPORTED
    # a row the older print lacks (the script printed it later) shows nothing
    assert verdict(_lines(*newer), at_clean=_lines("sage_grpo dual", "mix_grpo own")) == "undecided (different code)"


def test_a_row_that_borrowed_another_rows_lr_is_not_tested_as_named(tmp_path):
    """The stored main table: its dual-KL row ran at SAGE-GRPO's (fixed-KL) choice, from a record keyed by method."""
    # in suite order, as suites/main_table.yaml: the grid's rows (a record keyed by method names a method's first
    # reading, here its fixed-KL row), then the union's dual-KL row
    rows = {"sage_grpo kl=fixed": _row("sage_grpo", 0.1 + NOISE),
            "flow_grpo kl=fixed": _row("flow_grpo", 0.0 + NOISE),
            "sage_grpo kl=dual": _row("sage_grpo", 0.3 + NOISE, labels={"kl": "dual"}, kl="dual")}
    claim = _claim({"method": "sage_grpo", "kl": "dual"}, {"method": "flow_grpo"})
    v = evaluate(claim, _write(tmp_path / "a", rows, TUNED))
    assert v.verdict == NOT_AS_NAMED and "borrowed lr" in v.effect and "`sage_grpo [kl=dual]`" in v.effect
    assert "+0.300" in v.effect and "tuned choice" in v.needed
    # its own choice, at the lr it ran: decided
    own = {**TUNED, "sage_grpo [kl=dual]": {"lr": 3e-5}}
    assert evaluate(claim, _write(tmp_path / "b", rows, own)).verdict == SUPPORTED
    # its own choice is another lr: it ran off its choice
    off = {**TUNED, "sage_grpo [kl=dual]": {"lr": 1e-5}}
    v = evaluate(claim, _write(tmp_path / "c", rows, off))
    assert v.verdict == NOT_AS_NAMED and "ran at lr 3e-05, its tuned choice is 1e-05" in v.effect
    # the rival read off its own choice labels the comparison just the same
    rival_off = {**own, "flow_grpo": {"lr": 1e-4}}
    assert evaluate(claim, _write(tmp_path / "d", rows, rival_off)).verdict == NOT_AS_NAMED


def test_development_seeds_and_an_untuned_suite_are_not_tested_as_named(tmp_path):
    """Claim 4's stored ablate_kl: release 0.3 cells at lr 1e-4 untuned, seeds 0-2."""
    dev = [0, 1, 2, 3, 4]
    rows = {"sage_grpo kl=dual": _row("sage_grpo", 0.3 + NOISE, labels={"kl": "dual"}, kl="dual", seeds=dev),
            "sage_grpo kl=none": _row("sage_grpo", 0.0 + NOISE, labels={"kl": "none"}, kl="none", seeds=dev)}
    claim = _claim({"kl": "dual"}, {"kl": "none"})
    tuned = {"sage_grpo": {"lr": 3e-5}, "sage_grpo [kl=none]": {"lr": 3e-5}}
    v = evaluate(claim, _write(tmp_path / "a", rows, tuned))
    assert v.verdict == NOT_AS_NAMED and "development seeds 0–4" in v.effect and "untuned" not in v.effect
    v = evaluate(claim, _write(tmp_path / "b", rows))  # no tuned.json: untuned as well
    assert v.verdict == NOT_AS_NAMED and "development seeds 0–4, untuned (lr 3e-05; no tuned.json" in v.effect
    # the same rows on test seeds, each at its own choice: decided
    test = {g: {**r, "seeds": TEST_SEEDS} for g, r in rows.items()}
    assert evaluate(claim, _write(tmp_path / "c", test, tuned)).verdict == SUPPORTED
    # a one-row check (Moves) is labelled the same way, and a claim that reads rows as they ran is decided
    moves = Claim("m", "dual learns", "s", (Moves(row={"kl": "dual"}, metric="Oracle", direction=+1),),
                  as_named=TUNED_ON_TEST_SEEDS)
    assert evaluate(moves, tmp_path / "a").verdict == NOT_AS_NAMED
    assert evaluate(_claim({"kl": "dual"}, {"kl": "none"}, as_named=None), tmp_path / "a").verdict == SUPPORTED


def test_the_old_fingerprints_file_reads_and_recording_keeps_it(tmp_path):
    import hashlib

    from grpo_bench.report.claims.provenance import output_digest

    # the script's printed lines, hashed as `sha256sum` hashes its stdout
    assert output_digest(["cps fixed 12 34", "cps dual 56 78"]) == hashlib.sha256(
        b"cps fixed 12 34\ncps dual 56 78\n").hexdigest()
    (tmp_path / "fingerprints.json").write_text(json.dumps({CLEAN: "1" * 64}))
    assert read_fingerprints(tmp_path) == {CLEAN: {LEGACY_CPU: "1" * 64}}
    record(tmp_path / "fingerprints.json", CLEAN + "+dirty", "Intel(R) Xeon(R) Processor", "2" * 64)
    assert read_fingerprints(tmp_path) == {CLEAN: {LEGACY_CPU: "1" * 64},
                                           CLEAN + "+dirty": {"Intel(R) Xeon(R) Processor": "2" * 64}}
    with pytest.raises(UserError, match="already records"):  # a fingerprint is a fact: never overwritten
        record(tmp_path / "fingerprints.json", CLEAN, LEGACY_CPU, "3" * 64)
    assert read_fingerprints(tmp_path)[CLEAN] == {LEGACY_CPU: "1" * 64}


@pytest.mark.parametrize("name, text, key", [
    ("fingerprints.json", json.dumps({CLEAN: 5}), f"key '{CLEAN}'"),
    ("fingerprints.json", "[1, 2]", "a list"),
    ("fingerprint_lines.json", json.dumps({"0" * 64: ["cps fixed 0123456789abcdef 0123456789abcdef"]}),
     f"fingerprint_lines.json: key '{'0' * 64}': its lines hash to"),
    ("main_table/tuned.json", json.dumps({"methods": {"sage_grpo": {"chosen": 3e-5}}}), "methods.sage_grpo.chosen"),
])
def test_a_malformed_record_is_one_line_before_any_claim(tmp_path, name, text, key):
    rows = {"sage_grpo": _row("sage_grpo", 0.3 + NOISE), "flow_grpo": _row("flow_grpo", 0.0 + NOISE)}
    root = _write(tmp_path, rows, name="main_table")  # the ledger's claim 1 reads it
    (root / name).write_text(text)
    with pytest.raises(UserError, match=key):
        ledger(root)
    result = CliRunner().invoke(app, ["claims", str(root)])
    assert isinstance(result.exception, UserError)  # cli/entry.py prints it as one line, exit 2
    assert not (root / "CLAIMS.md").exists()  # nothing written


def test_every_claim_on_a_suite_names_its_rows_tuned_on_test_seeds():
    from grpo_bench.report.claims import CLAIMS, Samplers, WinRates

    on_rows = [c for c in CLAIMS if not all(isinstance(k, (Samplers, WinRates)) for k in c.checks)]
    assert on_rows and all(c.as_named == TUNED_ON_TEST_SEEDS for c in on_rows)


def test_the_stored_reports_read_as_named_where_they_were_re_run():
    """Claim 1's dual-KL row, which borrowed SAGE-GRPO's lr, has its own tuned choice now (reports/main_table's
    tuned.json) and is read as named, at the level the main table's report prints for the seeds it stores (the
    look its sequential plan reached); claim 4 reads ablate_kl re-run tuned on test seeds (each reading at its own
    choice), and so do claim 5's kl_weight (the paper's two-stage schedule at its own choice, 1e-4) and claim 3's
    ablate_equalizer (FlowGRPO without the equalizer at its own choice, 1e-4)."""
    import re

    import pandas as pd

    from grpo_bench.report.claims import CLAIMS

    root = Path(__file__).resolve().parents[2] / "reports"
    by_key = {c.key: c for c in CLAIMS}
    tuned = json.loads((root / "main_table" / "tuned.json").read_text())["methods"]
    assert tuned["sage_grpo [kl=dual]"]["chosen"] == {"lr": 3e-5}  # its own grid's choice
    cells = pd.read_parquet(root / "main_table" / "results.parquet", columns=["kind", "seed"])
    seeds = cells[cells["kind"] == "cell"]["seed"].nunique()
    printed = re.search(rf"(\S+) at {seeds} seeds", (root / "main_table" / "report.md").read_text())
    assert printed, f"the report prints no level for {seeds} seeds"
    v = evaluate(by_key["table2_B"], root)
    assert v.verdict not in (NOT_AS_NAMED, NOT_VERIFIED)
    assert f"({seeds} seeds; level {printed.group(1)})" in v.effect and float(printed.group(1)) < 0.05
    v = evaluate(by_key["dual_kl"], root)  # ablate_kl re-ran tuned on test seeds: each reading at its own choice
    chosen = json.loads((root / "ablate_kl" / "tuned.json").read_text())["methods"]
    assert chosen["sage_grpo [kl=fixed]"]["chosen"] == {"lr": 1e-4}
    assert chosen["sage_grpo [kl=dual]"]["chosen"] == {"lr": 3e-5}
    assert v.verdict not in (NOT_AS_NAMED, NOT_VERIFIED) and "not tested as named" not in v.effect
    assert "sage_grpo kl=dual lr=3e-05 − sage_grpo kl=fixed lr=0.0001" in v.effect
    v = evaluate(by_key["kl_weight"], root)  # kl_weight re-ran tuned on test seeds too
    chosen = json.loads((root / "kl_weight" / "tuned.json").read_text())["methods"]
    two_stage = next(name for name in chosen if "kl_feedback=ziegler" in name)
    assert chosen[two_stage]["chosen"] == {"lr": 1e-4} and chosen["sage_grpo"]["chosen"] == {"lr": 3e-5}
    assert v.verdict not in (NOT_AS_NAMED, NOT_VERIFIED) and "not tested as named" not in v.effect
    assert "kl_feedback=ziegler kl_warmup=100 kl_schedule_unit=optimizer_step − sage_grpo kl=dual kl_adaptive=off " \
           "kl_weight=0.001 lr=3e-05" in v.effect
    v = evaluate(by_key["equalizer"], root)  # ablate_equalizer re-ran tuned on test seeds: each row at its own lr
    chosen = json.loads((root / "ablate_equalizer" / "tuned.json").read_text())["methods"]
    assert chosen["flow_grpo [equalizer=off]"]["chosen"] == {"lr": 1e-4} and chosen["flow_grpo"]["chosen"] == {
        "lr": 3e-5}
    assert v.verdict not in (NOT_AS_NAMED, NOT_VERIFIED) and "not tested as named" not in v.effect
    assert "flow_grpo kl=flow_grpo equalizer=on lr=3e-05 − flow_grpo kl=flow_grpo equalizer=off lr=0.0001" in str(v)
