"""The stored files the claims read besides results tables (Table 1's ``table1.csv``, a study's ``table3.csv``,
``fingerprints.json``), checked on load: they are untrusted input, so a damaged one is one line naming the file
and what is wrong (exit 2), never a traceback from deep inside a check."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from grpo_bench.errors import UserError


def read_csv(path: Path, text: Sequence[str], numbers: Sequence[str], optional: Sequence[str] = ()) -> pd.DataFrame:
    """``path`` as a table with the ``text`` and ``numbers`` columns (``optional`` numbers checked when present);
    every value of a number column a finite number (an empty cell is allowed: it reads as missing)."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:  # pandas' ParserError and EmptyDataError are ValueErrors
        raise UserError(f"{path}: not a readable CSV table ({' '.join(str(exc).split())[:160]})") from None
    missing = [c for c in (*text, *numbers) if c not in frame]
    if missing:
        raise UserError(f"{path}: missing columns {', '.join(missing)} (expected {', '.join((*text, *numbers))})")
    for column in (*numbers, *(c for c in optional if c in frame)):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = frame[column][(values.isna() & frame[column].notna()) | values.isin([math.inf, -math.inf])]
        if len(bad):
            raise UserError(f"{path}: column {column!r} must hold finite numbers, got {str(bad.iloc[0])[:40]!r}")
        frame[column] = values
    for column in text:
        frame[column] = frame[column].astype(str)
    return frame
