"""The project's one atomic writer: write a hidden temp file beside the target, fsync, ``os.replace``.

A killed process leaves either the old file or the new one, never a torn one. Every file the project
writes goes through ``atomic_write`` (bytes, text, JSON, or a library that writes to a path:
parquet, safetensors), so three guarantees hold everywhere:

* files get the user's normal permissions (``0o666 & ~umask``; ``mkstemp`` alone would give 0600);
* a full disk is one ``DiskFull`` error ("no space left on <path>"), and the temp file is removed;
* leftovers of a killed writer are hidden ``.<name>.*.tmp`` files that ``clean_temp`` removes.
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_bench.errors import UserError

TMP_SUFFIX = ".tmp"


class DiskFull(UserError, OSError):
    """The disk (or quota) is full: no cell can make progress, so a runner stops scheduling.
    A UserError (one line, no traceback) and an OSError (code that handles I/O errors sees it)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"no space left on {path}")
        self.errno, self.path = errno.ENOSPC, str(path)

    def __str__(self) -> str:
        return f"no space left on {self.path}"


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, DiskFull) or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """``write(tmp_path)`` fills a temp file in the target's folder; it then replaces ``path`` atomically."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFull(path.parent) from None
        raise
    tmp = Path(name)
    try:
        os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as fh:  # the bytes are on disk before the rename makes them visible
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc) and not isinstance(exc, DiskFull):
            raise DiskFull(path) from None
        if isinstance(exc, (OSError, ValueError)) and name in str(exc):  # a library names the hidden temp file
            raise UserError(f"cannot write {path}: {str(exc).replace(name, str(path))}") from None
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None (JSON's null), in nested dicts, lists and tuples."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def strict_json(obj: Any, **options: Any) -> str:
    """JSON every parser reads (RFC 8259): a missing value (NaN, inf) is ``null``, never a bare ``NaN``."""
    return json.dumps(finite(obj), allow_nan=False, **options)


def atomic_write_json(path: str | Path, obj: Any, *, round_trip: bool = False) -> Path:
    """Strict JSON (``strict_json``). ``round_trip``: a state file only grpo-bench reads back (a checkpoint, a
    cached eval), whose NaNs must come back as NaN for a resumed run to reproduce the uninterrupted one."""
    if round_trip:
        return atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")
    return atomic_write_text(path, strict_json(obj, indent=1, sort_keys=True, default=str) + "\n")


def clean_temp(folder: str | Path) -> int:
    """Remove temp files a killed writer left directly in ``folder``; returns how many."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    stale = [p for p in folder.glob(f".*{TMP_SUFFIX}") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def append_line(path: str | Path, line: str) -> None:
    """Append one line and fsync. A crash mid-append can leave one partial final line, which
    ``read_jsonl`` tolerates (and only there)."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFull(path) from None
        raise


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file. A torn last line (a writer killed mid-append) is dropped; a bad line
    anywhere else is corruption, not a crash, and is a UserError naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); the file is corrupt") from None
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                continue
            raise UserError(f"{path}:{i + 1}: not a JSON line (the file is corrupt; only a torn last "
                            "line is expected after a crash)") from None
    return rows
