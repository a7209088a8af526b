"""The seconds one update takes on this machine, measured by the finished cells already in a job's folders.

A job's ETA (suite/live.py) starts from this pace before any cell of the current invocation has finished, so a
resumed main job (tuning grid, then table) shows a whole-job estimate from its first second. Only cells whose
stored machine line (their ``cell`` row in ``rows.parquet``, suite/rows.py) names this host count: a cell
restored from another machine's stored table measures that machine, not this one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from grpo_bench.suite.machine import host
from grpo_bench.suite.run_folder import ROWS, is_done


def cell_cost(cell_dir: Path) -> tuple[str, float, int] | None:
    """(machine, trainer wall seconds, updates) of a finished cell, None when its files do not say (data read back
    from disk is untrusted: anything unreadable or implausible is skipped, never raised)."""
    if not (is_done(cell_dir) and (cell_dir / ROWS).is_file()):
        return None
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(cell_dir / ROWS, columns=["kind", "metric", "value", "text"]).to_pylist()
        row = next(r for r in table if r["kind"] == "cell" and r["metric"] == "wall_time")
        info = json.loads(row["text"])
        seconds, updates = float(row["value"]), int(info["config"]["updates"])
        where = str(info["machine"])
    except Exception:  # a torn, foreign or pre-machine file: this cell does not inform the pace
        return None
    if not (seconds > 0 and updates > 0 and seconds == seconds and seconds != float("inf")):
        return None
    return where, seconds, updates


def measured_pace(folders: Iterable[Path]) -> float | None:
    """Seconds per update on one worker of this host, over the finished cells of ``folders`` that ran here; None
    when none did."""
    here = host() + ","
    seconds = updates = 0.0
    for folder in folders:
        if not Path(folder).is_dir():
            continue
        for cell_dir in Path(folder).iterdir():
            cost = cell_cost(cell_dir) if cell_dir.is_dir() else None
            if cost is not None and cost[0].startswith(here):
                seconds, updates = seconds + cost[1], updates + cost[2]
    return seconds / updates if updates else None
