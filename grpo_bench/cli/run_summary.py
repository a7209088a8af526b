"""The short table ``run`` prints when a suite ends: each row's held-out learning as the report's Table 2 has it."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

SHOWN = ("Oracle", "Judge", "Correct")
"""Table 2's headline columns, printed where the report has them (learning: end minus update 0)."""


def _cell(row: dict[str, str], column: str) -> str:
    try:
        mean, half = float(row[f"{column}_mean"]), float(row.get(f"{column}_ci") or "nan")
    except (KeyError, ValueError):
        return "–"
    if not math.isfinite(mean):
        return "–"
    return f"{mean:+.3f} ± {half:.3f}" if math.isfinite(half) else f"{mean:+.3f}"


def print_summary(report: Path, console: Console) -> None:
    """The rows of ``report``'s ``tables/table2.csv`` (nothing when the report has no Table 2)."""
    path = Path(report).parent / "tables" / "table2.csv"
    if not path.is_file():
        return
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    columns = [c for c in SHOWN if f"{c}_mean" in rows[0]]
    table = Table(title="held-out learning (end - update 0), mean ± 95% t over seeds; the report has the rest")
    for name in ("setting", "row", "seeds", *columns):
        table.add_column(name)
    for row in rows:
        seeds = row.get(f"{columns[0]}_n", "") if columns else ""
        seeds = str(int(float(seeds))) if seeds not in ("", "nan") else "–"
        table.add_row(row.get("setting", ""), row.get("group", ""), seeds, *(_cell(row, c) for c in columns))
    console.print(table)
