"""The printed lines behind each recorded fingerprint: ``REPORTS_DIR/fingerprint_lines.json``, a content-addressed
store ``{sha256: [line, ...]}`` of ``benchmarks/behaviour_fingerprint.py``'s output, so that the ledger can read a
fingerprint row by row (one line per method and KL reading: ``dance_grpo fixed c61281d74f2dd790 b77f192c7b5849a4``)
where two whole hashes differ only because the script printed more rows at one commit than at another.

The store is data from disk and verifies itself: an entry is kept only where its lines are the script's
``<method> <reading> <hex16> <hex16>``, no row twice, and hash (``output_digest``, the text as printed) to the key
they are stored under; anything else is refused in one line naming the file and the key. A key names its lines, not
a commit: which commit and CPU printed them is ``fingerprints.json``'s record (provenance.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo_bench.errors import UserError

FINGERPRINT_LINES = "fingerprint_lines.json"
OWN = "own"
"""The reading of a fingerprint line run with the KL left to the method (the script's field rows)."""
LINE = re.compile(r"(\S+) (\S+) [0-9a-f]{16} [0-9a-f]{16}")
"""One printed row: method, reading (a KL variant, or ``own``), the metrics hash and the checkpoint hash."""
SHA256 = re.compile(r"[0-9a-f]{64}")

PrintedRows = dict[str, dict[str, str]]
"""fingerprint sha256 -> {row label ("dance_grpo fixed"): its printed line}, in printed order."""


def output_digest(lines: Sequence[str]) -> str:
    """The fingerprint of ``benchmarks/behaviour_fingerprint.py``'s printed lines: sha256 of the text as printed
    (``sha256sum`` of its stdout)."""
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def rows_of(lines: Sequence[str], where: str) -> dict[str, str]:
    """{row label: line} of a print; a line that is not the script's, or a row printed twice, is refused (one
    line, prefixed with ``where``)."""
    rows: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        found = LINE.fullmatch(line) if isinstance(line, str) else None
        if found is None:
            raise UserError(f"{where}line {number} {line!r} is not '<method> <reading> <hex16> <hex16>'")
        label = f"{found[1]} {found[2]}"
        if label in rows:
            raise UserError(f"{where}line {number} prints row {label!r} a second time; a print has one line a row")
        rows[label] = line
    return rows


def row_label(config: dict[str, Any], labels: dict[str, Any]) -> str:
    """The fingerprint row that exercises a stored cell's code: ``"<method> <kl>"``, the kl as its config stores it
    (resolved: the estimator that ran), or ``"<method> own"`` where the cell's suite left the kl to the method
    (its labels record kl as None), as the script's ``own`` rows do.

    Why ``own`` only then: an ``own`` row runs with the kl left to the method, resolved by the code of the commit
    that printed it; a cell whose kl was left to the method resolved it by the code of the commit it ran, so the
    two name one estimator at each commit. A cell that set its kl by hand to a value that is the method's default
    today (DiffusionNFT's fair row: kl none, 3 trained steps) may not have run what that commit's ``own`` row ran
    (the default can move between commits; the other method options differ): it reads ``<method> <kl>``, which no
    print has, so its code is not shown (conservative). For the same reason a cell left to its method reads
    ``own`` even where a row of its resolved kl exists (SAGE-GRPO as shipped, resolved to dual)."""
    left_to_method = "kl" in labels and labels["kl"] is None
    return f"{config.get('method')} {OWN if left_to_method else config.get('kl')}"


def read_fingerprint_lines(root: Path) -> PrintedRows:
    """``root / fingerprint_lines.json`` ({} when absent), every entry verified (module docstring)."""
    path = Path(root) / FINGERPRINT_LINES
    raw = read_json_object(path, "{sha256: [line, ...]}")
    return {key: _verified(path, key, lines) for key, lines in (raw or {}).items()}


def read_json_object(path: Path, shape: str) -> dict[str, Any] | None:
    """The JSON object stored at ``path`` (None when absent); unreadable JSON or another type is refused in one line
    naming the file and the expected ``shape``."""
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); expected a JSON object {shape}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a {type(raw).__name__}; expected a JSON object {shape}")
    return raw


def _verified(path: Path, key: str, lines: Any) -> dict[str, str]:
    where = f"{path}: key {key!r}: "
    if not SHA256.fullmatch(key):
        raise UserError(f"{where}not a sha256 (64 lowercase hex digits); allowed: the sha256 of the lines it holds")
    if not isinstance(lines, list) or not lines:
        raise UserError(f"{where}{str(lines)[:60]!r}; allowed: a non-empty list of the script's printed lines")
    rows = rows_of(lines, where)
    digest = output_digest(lines)
    if digest != key:
        raise UserError(f"{where}its lines hash to {digest}, not to their key; allowed: lines stored under the "
                        "sha256 of their printed text (the entry was altered, or stored under another print's hash)")
    return rows


def record_lines(path: Path, lines: Sequence[str]) -> str:
    """Store ``lines`` under their digest in the store at ``path`` (every entry it held kept; an atomic write); the
    digest. Lines that are not the script's are refused: nothing is written."""
    from grpo_bench.atomic import atomic_write_text

    if path.name != FINGERPRINT_LINES:
        raise UserError(f"{path}: the fingerprint lines file is named {FINGERPRINT_LINES}")
    digest = output_digest(lines)
    held = read_fingerprint_lines(path.parent)
    held[digest] = rows_of(lines, f"{path}: the lines to store under {digest}: ")
    text = json.dumps({k: list(rows.values()) for k, rows in sorted(held.items())}, indent=1) + "\n"
    atomic_write_text(path, text)
    return digest
