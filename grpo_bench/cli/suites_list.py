"""``grpo-bench suites``: every suite in suites/ with its cells and what a cell costs.

A cell's cost is a measurement, never a guess dressed as one: the median trainer wall time of the suite's finished
cells that ran on this host (``runs/<suite>``, ``runs/<suite>_tune``), else of its stored results
(``reports/<suite>/results.parquet``, whose cells name the machine they ran on), else none (a real-model suite:
``grpo-bench plan`` predicts its GPU time).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grpo_bench.errors import UserError


def _stored_minutes(results: Path) -> tuple[float, str] | None:
    """(median minutes a cell, the machine most of them ran on) of a stored results table, None if it has none."""
    if not results.is_file():
        return None
    try:
        from grpo_bench.suite.results import read_table

        rows = read_table(results, columns=["kind", "metric", "value", "text"])
        rows = rows[rows["kind"].eq("cell").fillna(False) & rows["metric"].eq("wall_time").fillna(False)]
        cells = [(float(v), json.loads(t).get("machine", "")) for v, t in zip(rows["value"], rows["text"])]
    except Exception:  # a stored file is untrusted: an unreadable one measures nothing
        return None
    cells = [(s, m) for s, m in cells if s == s and s > 0]
    if not cells:
        return None
    machines = [m for _, m in cells]
    return statistics.median(s for s, _ in cells) / 60, max(set(machines), key=machines.count)


def _local_minutes(folders: list[Path]) -> float | None:
    from grpo_bench.suite.machine import host
    from grpo_bench.suite.pace import cell_cost

    here = host() + ","
    seconds = [c[1] for f in folders if f.is_dir() for d in f.iterdir()
               if d.is_dir() and (c := cell_cost(d)) is not None and c[0].startswith(here)]
    return statistics.median(seconds) / 60 if seconds else None


def _duration(minutes: float) -> str:
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def suites_command(folder: Path, runs: Path, reports: Path, console: Console) -> int:
    from grpo_bench.report.picks import SourceNotStored
    from grpo_bench.report.suite_parts import load_suite_checked
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.tune import tuning_suite
    from grpo_bench.world.roles import video_world

    world = video_world().model  # also the run config's default model

    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        raise UserError(f"{folder}: no suite files (*.yaml); give the suites folder, e.g. --suites suites")
    table = Table(title=f"suites in {folder} (cost: median minutes a cell; compute = cells x that, divide by --jobs "
                        "for wall)")
    for col in ("suite", "cells", "a cell", "compute", "measured on"):
        table.add_column(col)
    for path in paths:
        try:
            suite = load_suite_checked(path)
        except SourceNotStored:  # pre-registered: its rows are picked from a report not stored yet
            table.add_row(path.stem, "-", "-", "-", f"waits for the stored report its pick reads (`grpo-bench plan "
                          f"{path}` says which)")
            continue
        table_cells = len(expand(suite))
        names = [suite.name]
        grid = 0
        if suite.tune is not None:
            tuning = tuning_suite(suite)
            grid, names = len(expand(tuning)), [suite.name, tuning.name]
        cells = f"{grid} tuning + {table_cells}" if grid else str(table_cells)
        minutes, where = _local_minutes([runs / n for n in names]), "this machine (runs/)"
        if minutes is None:
            stored = _stored_minutes(reports / suite.name / "results.parquet")
            minutes, where = (stored[0], f"{stored[1].split(', torch')[0]} (reports/)") if stored else (None, "")
        if minutes is None:
            table.add_row(suite.name, cells, "-", "-", "not measured: a real-model suite's GPU time is "
                          f"`grpo-bench plan {path}`'s prediction" if suite.base.get("model", world) != world
                          else "not measured")
        else:
            table.add_row(suite.name, cells, f"{minutes:.1f} min", _duration(minutes * (grid + table_cells)), where)
    console.print(table)
    return 0
