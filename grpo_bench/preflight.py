"""Checks of the machine-facing inputs, run before any work starts: output paths and devices.

Each failure is a one-line UserError naming the flag or key, what was given, and what is allowed;
nothing here writes a file.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from grpo_bench.errors import UserError

MAX_NAME = 120
"""Longest suite name: a folder name (255 bytes on most file systems) with room for what is added."""
MAX_SHOWN = 200
"""Characters of a user value echoed in an error (a 10 MB prompt is not printed whole)."""


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how much was left out."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def out_dir(path: str | Path, flag: str = "--out") -> Path:
    """A folder that exists and is writable, or can be created: else one line saying why not."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {str(path)!r} is a file, not a folder; choose a folder")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise UserError(f"{flag} {str(path)!r}: {str(base)!r} is a file, so the folder cannot be created")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {str(path)!r}: {str(base)!r} is not writable (permission denied)")
    return path


def out_file(path: str | Path, flag: str = "--out") -> Path:
    """A file path whose folder is writable (or creatable) and that is not a folder itself."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {str(path)!r} is a folder; give a file name")
    out_dir(path.parent if str(path.parent) else Path("."), flag=f"{flag} {str(path)!r}: folder")
    return path


def folder_name(name: str, where: str = "") -> str:
    """A suite name usable as one folder under --out (no '.', '..', separators or over-long names)."""
    import re

    if name in (".", "..") or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or len(name) > MAX_NAME:
        raise UserError(f"{where}name must be a folder-safe string (at most {MAX_NAME} letters, digits, _ . - "
                        f"(not '.' or '..'), got {shown(name, 60)}")
    return name


def device(name: str, where: str = "") -> str:
    """'auto', 'cpu', 'cuda' or 'cuda:N' that this build and machine can use."""
    import re

    if not (name in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", name)):
        raise UserError(f"{where}device must be auto, cpu, cuda or cuda:N, got {shown(name, 60)}")
    if name.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            build = "this torch build has no CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise UserError(f"{where}device {name!r}: {build}; use device=cpu or auto")
        if ":" in name and int(name.split(":")[1]) >= torch.cuda.device_count():
            raise UserError(f"{where}device {name!r}: only {torch.cuda.device_count()} GPU(s) visible")
    return name


def finite(name: str, value: float, where: str = "") -> None:
    if not math.isfinite(value):
        raise UserError(f"{where}{name} must be a finite number, got {value!r}")
