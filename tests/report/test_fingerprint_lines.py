"""Behaviour per row (issue 40, item 3): the printed lines behind each fingerprint, stored under their sha256 and
verified when read, and two commits read as one behaviour for given rows where their whole hashes differ but the
rows' lines are equal (report/claims/fingerprint_lines.py, provenance.py ``same_behaviour_for``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from grpo_bench.errors import UserError
from grpo_bench.report.claims.fingerprint_lines import read_fingerprint_lines, record_lines, row_label
from grpo_bench.report.claims.provenance import (
    LEGACY_CPU,
    read_fingerprints,
    record_output,
    same_behaviour,
    same_behaviour_for,
)

INTEL = "Intel(R) Xeon(R) Processor"
DANCE = "dance_grpo fixed c61281d74f2dd790 b77f192c7b5849a4"
SAGE = "sage_grpo dual b31ddc6f98bfa753 900bc649a68e2575"
MIX = "mix_grpo own 1cfccdd2c8f81a1f 31700437301a3ff6"
OLD = [DANCE, SAGE]  # a print before the field's rows were added
NEW = [DANCE, SAGE, MIX]  # the same rows, one row more
SAGE_MOVED = "sage_grpo dual b31ddc6f98bfa753 900bc649a68e2576"  # one hex digit of the checkpoint hash


def _sha(lines: list[str]) -> str:
    """The print's sha256 as `sha256sum` computes it over the script's stdout (independent of the module)."""
    return hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()


def _store(root: Path, *prints: list[str]) -> dict:
    for lines in prints:
        assert record_lines(root / "fingerprint_lines.json", lines) == _sha(lines)
    return read_fingerprint_lines(root)


def test_one_behaviour_for_the_rows_read_where_the_whole_hashes_differ(tmp_path):
    rows = _store(tmp_path, OLD, NEW, [DANCE, SAGE_MOVED])
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    prints = {a: {LEGACY_CPU: _sha(OLD)}, b: {LEGACY_CPU: _sha(NEW)}, c: {LEGACY_CPU: _sha([DANCE, SAGE_MOVED])}}
    # identical whole hashes: one behaviour for any rows, lines or none
    same = {a: prints[a], "d" * 40: {LEGACY_CPU: _sha(OLD)}}
    assert same_behaviour(same, a, "d" * 40) and same_behaviour_for(same, {}, a, "d" * 40, ["cps own"])
    # the whole hashes differ (8 rows against 14), the rows read are printed alike: one behaviour for them
    assert not same_behaviour(prints, a, b)
    assert same_behaviour_for(prints, rows, a, b, ["dance_grpo fixed", "sage_grpo dual"])
    assert same_behaviour_for(prints, rows, b, a, ["sage_grpo dual"])  # symmetric
    # a row whose line differs: not one behaviour, though the other row read is alike
    assert not same_behaviour_for(prints, rows, a, c, ["dance_grpo fixed", "sage_grpo dual"])
    assert same_behaviour_for(prints, rows, a, c, ["dance_grpo fixed"])
    # a row the older print lacks shows nothing
    assert not same_behaviour_for(prints, rows, a, b, ["dance_grpo fixed", "mix_grpo own"])
    # no rows named, or a print whose lines are not stored: the whole hashes only
    assert not same_behaviour_for(prints, rows, a, b, [])
    assert not same_behaviour_for(prints, {k: v for k, v in rows.items() if k != _sha(OLD)}, a, b,
                                  ["dance_grpo fixed"])


def test_rows_are_compared_like_with_like_on_every_shared_cpu(tmp_path):
    rows = _store(tmp_path, OLD, NEW, [DANCE, SAGE_MOVED])
    a, b = "a" * 40, "b" * 40
    # equal rows, but printed on two CPUs: a print from another CPU says nothing
    assert not same_behaviour_for({a: {LEGACY_CPU: _sha(OLD)}, b: {INTEL: _sha(NEW)}}, rows, a, b,
                                  ["dance_grpo fixed"])
    # alike on the AMD EPYC, the row moved on the Intel Xeon: not one behaviour
    both = {a: {LEGACY_CPU: _sha(OLD), INTEL: _sha(OLD)}, b: {LEGACY_CPU: _sha(NEW), INTEL: _sha([DANCE, SAGE_MOVED])}}
    assert not same_behaviour_for(both, rows, a, b, ["sage_grpo dual"])
    assert same_behaviour_for(both, rows, a, b, ["dance_grpo fixed"])


def test_the_stored_prints_read_as_the_issue_found_them():
    """296c227 printed 8 rows, 6914aed 14: the whole hashes differ, the main four methods' 8 rows are identical."""
    reports = Path(__file__).resolve().parents[2] / "reports"
    prints, rows = read_fingerprints(reports), read_fingerprint_lines(reports)
    old, new = "296c2278925d9abccc113798002375a6b845ff28", "6914aed31a5d79f0808d11180d3f52d891d22a75"
    assert [len(rows[prints[c][LEGACY_CPU]]) for c in (old, new)] == [8, 14]
    main = [f"{m} {kl}" for m in ("dance_grpo", "flow_grpo", "cps", "sage_grpo") for kl in ("fixed", "dual")]
    assert not same_behaviour(prints, old, new)
    assert same_behaviour_for(prints, rows, old, new, main)
    assert not same_behaviour_for(prints, rows, old, new, [*main, "mix_grpo own"])


@pytest.mark.parametrize("entry, words", [
    ({_sha(OLD): [DANCE, SAGE_MOVED]}, "its lines hash to"),  # tampered: a line edited, its key kept
    ({_sha(OLD): NEW}, "its lines hash to"),  # another print's lines under this key
    ({_sha(OLD)[:16]: OLD}, "not a sha256"),
    ({_sha(OLD): []}, "a non-empty list"),
    ({_sha(["dance_grpo fixed c61281d7 b77f192c"]): ["dance_grpo fixed c61281d7 b77f192c"]},
     "line 1 'dance_grpo fixed c61281d7 b77f192c' is not '<method> <reading> <hex16> <hex16>'"),
    ({_sha([DANCE, DANCE]): [DANCE, DANCE]}, "line 2 prints row 'dance_grpo fixed' a second time"),
])
def test_a_damaged_lines_entry_is_refused_in_one_line_naming_the_file_and_key(tmp_path, entry, words):
    (tmp_path / "fingerprint_lines.json").write_text(json.dumps(entry))
    with pytest.raises(UserError) as refused:
        read_fingerprint_lines(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and words in message
    assert message.startswith(f"{tmp_path / 'fingerprint_lines.json'}: key {next(iter(entry))!r}: ")


def test_recording_writes_the_hash_and_its_lines_and_a_refused_record_writes_neither(tmp_path):
    path = tmp_path / "fingerprints.json"
    assert record_output(path, "a" * 40, LEGACY_CPU, OLD) == _sha(OLD)
    assert read_fingerprints(tmp_path) == {"a" * 40: {LEGACY_CPU: _sha(OLD)}}
    assert read_fingerprint_lines(tmp_path) == {_sha(OLD): {"dance_grpo fixed": DANCE, "sage_grpo dual": SAGE}}
    record_output(path, "b" * 40, LEGACY_CPU, NEW)  # the entries held are kept
    assert sorted(json.loads((tmp_path / "fingerprint_lines.json").read_text())) == sorted([_sha(OLD), _sha(NEW)])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(UserError, match="already records"):  # the same commit and CPU, another print
        record_output(path, "a" * 40, LEGACY_CPU, [DANCE, SAGE_MOVED])
    with pytest.raises(UserError, match="is not '<method> <reading>"):  # not the script's lines
        record_output(path, "c" * 40, LEGACY_CPU, ["Traceback (most recent call last):"])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_cell_reads_the_row_of_the_kl_it_ran_and_own_only_where_its_suite_left_the_kl_to_it():
    # the stored config's kl is the resolved one: what ran
    assert row_label({"method": "sage_grpo", "kl": "dual"}, {"method": "sage_grpo", "kl": "dual"}) == "sage_grpo dual"
    assert row_label({"method": "cps", "kl": "fixed"}, {"method": "cps"}) == "cps fixed"  # kl from the suite's base
    # as shipped: the suite left the kl to the method, as the script's own rows do
    assert row_label({"method": "mix_grpo", "kl": "none"}, {"method": "mix_grpo", "kl": None}) == "mix_grpo own"
    # set by hand to today's default (DiffusionNFT's fair row): not aliased to own
    assert row_label({"method": "diffusion_nft", "kl": "none"}, {"kl": "none"}) == "diffusion_nft none"
