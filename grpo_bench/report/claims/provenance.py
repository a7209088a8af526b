"""Which code a stored cell ran, as the ledger reads it: the whole commit string its record keeps (``+dirty``
included: ten characters of it would let a dirty tree pass as its clean commit), the CPU it ran on, and the
behaviour fingerprints recorded for commits in ``REPORTS_DIR/fingerprints.json``.

A fingerprint (``benchmarks/behaviour_fingerprint.py``'s output, hashed) is a fact about a (commit, CPU) pair:
the same commit prints other hashes on an Intel Xeon with AMX than on an AMD EPYC (float kernels differ), so two
commits are recorded as one behaviour only where both were fingerprinted on one CPU and the hashes agree. The
file's schema is ``{commit: {cpu: sha256}}``; the first schema, ``{commit: sha256}``, is still read, each entry
as measured on ``LEGACY_CPU`` (the machine that measured every one of them).

A cell of a dirty tree (``<commit>+dirty``) ran a diff that no commit names: it counts only where the behaviour
of that tree was fingerprinted under its whole string; otherwise its comparisons are *not verified*.

One behaviour for given rows (``same_behaviour_for``): the script prints one line per method and KL reading, and
``fingerprint_lines.json`` keeps the lines behind a hash (fingerprint_lines.py). Two commits whose whole hashes
differ are still one behaviour for a comparison where, on each CPU both were fingerprinted on, both prints are
stored and every row the comparison reads is printed by both with the same line (the script printed 8 rows at
296c227 and 14 at 6914aed, the 8 identical: the main table's rows did not change between them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from grpo_bench.errors import UserError
from grpo_bench.report.claims.fingerprint_lines import (
    FINGERPRINT_LINES,
    PrintedRows,
    output_digest,
    read_json_object,
    record_lines,
)

FINGERPRINTS = "fingerprints.json"
LEGACY_CPU = "AMD EPYC"
"""The CPU of every entry of the first schema (a bare hash per commit): the stored reports' machine."""
DIRTY = "+dirty"

Fingerprints = dict[str, dict[str, str]]
"""commit (whole string) -> {cpu: fingerprint hash}."""


def read_fingerprints(root: Path) -> Fingerprints:
    """``root / fingerprints.json`` in the current schema ({} when absent). The file is data from disk: anything
    but an object of commit -> hash (first schema) or commit -> {cpu: hash} is refused in one line."""
    path = Path(root) / FINGERPRINTS
    raw = read_json_object(path, "{commit: {cpu: sha256}}")
    if raw is None:
        return {}
    out: Fingerprints = {}
    for commit, value in raw.items():
        per_cpu = {LEGACY_CPU: value} if isinstance(value, str) else value
        if not isinstance(per_cpu, dict) or not per_cpu or not all(
                isinstance(c, str) and c and isinstance(h, str) and h for c, h in per_cpu.items()):
            raise UserError(f"{path}: key {commit!r}: {value!r}; allowed: a sha256 string (measured on {LEGACY_CPU}) "
                            "or a non-empty object {cpu: sha256 string}")
        out[str(commit)] = dict(per_cpu)
    return out


def is_dirty(commit: str) -> bool:
    return str(commit).endswith(DIRTY)


def verified(prints: Fingerprints, commit: str) -> bool:
    """A clean commit names its code; a dirty tree's code is known only where its behaviour was fingerprinted."""
    return not is_dirty(commit) or commit in prints


def same_behaviour(prints: Fingerprints, a: str, b: str) -> bool:
    """Commits ``a`` and ``b`` are one behaviour: the same string, or fingerprinted on one CPU with equal hashes
    (like with like: a hash from another CPU says nothing)."""
    return same_behaviour_for(prints, {}, a, b, ())


def same_behaviour_for(prints: Fingerprints, lines: PrintedRows, a: str, b: str, labels: Iterable[str]) -> bool:
    """Commits ``a`` and ``b`` are one behaviour for the rows ``labels`` ("dance_grpo fixed", ...): the same string,
    or fingerprinted on one CPU at least, and on every CPU both were fingerprinted on, the whole hashes equal or
    both prints stored in ``lines`` with every label printed by both as the same line. A label either print lacks
    (a row the script did not print yet at that commit) shows nothing: not one behaviour. No labels: the whole
    hashes only (``same_behaviour``)."""
    if a == b:
        return True
    wanted = sorted(set(labels))
    pa, pb = prints.get(a, {}), prints.get(b, {})
    shared = set(pa) & set(pb)
    return bool(shared) and all(pa[cpu] == pb[cpu] or _rows_agree(lines.get(pa[cpu]), lines.get(pb[cpu]), wanted)
                                for cpu in shared)


def _rows_agree(rows_a: dict[str, str] | None, rows_b: dict[str, str] | None, labels: Sequence[str]) -> bool:
    return (rows_a is not None and rows_b is not None and bool(labels)
            and all(label in rows_a and label in rows_b and rows_a[label] == rows_b[label] for label in labels))


def record(path: Path, commit: str, cpu: str, digest: str) -> Fingerprints:
    """Add (commit, cpu) -> digest to the fingerprints file at ``path`` (written in the current schema; every entry
    it held is kept). A different digest already recorded for the pair is refused: a fingerprint is a fact."""
    from grpo_bench.atomic import atomic_write_text

    prints = _recordable(path, commit, cpu, digest)
    prints.setdefault(commit, {})[cpu] = digest
    atomic_write_text(path, json.dumps(dict(sorted(prints.items())), indent=1, sort_keys=True) + "\n")
    return prints


def _recordable(path: Path, commit: str, cpu: str, digest: str) -> Fingerprints:
    """The fingerprints held at ``path``, where (commit, cpu) -> digest may be added to them; else refused."""
    if path.name != FINGERPRINTS:
        raise UserError(f"{path}: the fingerprints file is named {FINGERPRINTS}")
    prints = read_fingerprints(path.parent)
    held = prints.get(commit, {}).get(cpu)
    if held is not None and held != digest:
        raise UserError(f"{path}: key {commit!r} already records {held} on {cpu!r}, not {digest}; a fingerprint "
                        "that changes on one commit and CPU means the run is not deterministic: find out why")
    return prints


def record_output(path: Path, commit: str, cpu: str, lines: list[str]) -> str:
    """Record the fingerprint of ``lines`` for (commit, cpu) in ``path`` and the lines behind it in
    ``fingerprint_lines.json`` beside it (each an atomic write; the lines first, so that a recorded hash has its
    rows stored); the digest. A record that would be refused writes neither file."""
    digest = output_digest(lines)
    _recordable(path, commit, cpu, digest)
    record_lines(path.parent / FINGERPRINT_LINES, lines)
    record(path, commit, cpu, digest)
    return digest
