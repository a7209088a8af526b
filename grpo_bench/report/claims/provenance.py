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
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo_bench.errors import UserError

FINGERPRINTS = "fingerprints.json"
LEGACY_CPU = "AMD EPYC"
"""The CPU of every entry of the first schema (a bare hash per commit): the stored reports' machine."""
DIRTY = "+dirty"

Fingerprints = dict[str, dict[str, str]]
"""commit (whole string) -> {cpu: fingerprint hash}."""


def cpu_of(machine: str) -> str:
    """The CPU model of a cell's machine line ("AMD EPYC, 2 CPUs, no GPU, torch ..." -> "AMD EPYC")."""
    return str(machine or "").split(",", 1)[0].strip() or "?"


def read_fingerprints(root: Path) -> Fingerprints:
    """``root / fingerprints.json`` in the current schema ({} when absent). The file is data from disk: anything
    but an object of commit -> hash (first schema) or commit -> {cpu: hash} is refused in one line."""
    path = Path(root) / FINGERPRINTS
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); expected a JSON object {{commit: {{cpu: sha256}}}}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a {type(raw).__name__}; expected a JSON object {{commit: {{cpu: sha256}}}}")
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
    if a == b:
        return True
    pa, pb = prints.get(a, {}), prints.get(b, {})
    shared = set(pa) & set(pb)
    return bool(shared) and all(pa[cpu] == pb[cpu] for cpu in shared)


def record(path: Path, commit: str, cpu: str, digest: str) -> Fingerprints:
    """Add (commit, cpu) -> digest to the fingerprints file at ``path`` (written in the current schema; every entry
    it held is kept). A different digest already recorded for the pair is refused: a fingerprint is a fact."""
    from grpo_bench.atomic import atomic_write_text

    if path.name != FINGERPRINTS:
        raise UserError(f"{path}: the fingerprints file is named {FINGERPRINTS}")
    prints = read_fingerprints(path.parent)
    held = prints.get(commit, {}).get(cpu)
    if held is not None and held != digest:
        raise UserError(f"{path}: key {commit!r} already records {held} on {cpu!r}, not {digest}; a fingerprint "
                        "that changes on one commit and CPU means the run is not deterministic: find out why")
    prints.setdefault(commit, {})[cpu] = digest
    atomic_write_text(path, json.dumps(dict(sorted(prints.items())), indent=1, sort_keys=True) + "\n")
    return prints


def output_digest(lines: list[str]) -> str:
    """The fingerprint of ``benchmarks/behaviour_fingerprint.py``'s printed lines: sha256 of the text as printed
    (``sha256sum`` of its stdout)."""
    import hashlib

    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def record_output(path: Path, commit: str, cpu: str, lines: list[str]) -> str:
    """Record the fingerprint of ``lines`` for (commit, cpu) in ``path``; the digest."""
    digest = output_digest(lines)
    record(path, commit, cpu, digest)
    return digest
