"""The seconds one update takes on this machine, measured by the finished cells already in a job's folders.

A job's ETA (suite/live.py) starts from this pace before any cell of the current invocation has finished, so a
resumed main job (tuning grid, then table) shows a whole-job estimate from its first second. Only cells whose
stored machine line (their ``cell`` row in ``rows.parquet``, suite/rows.py) names this host count: a cell
restored from another machine's stored table measures that machine, not this one.

``train`` states its cost before its first update from the same cells (``pass_pace``): seconds per sample-step
pass, so that a run of any budget is estimated from cells of another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_bench.suite.machine import host
from grpo_bench.suite.results import read_table
from grpo_bench.suite.run_folder import ROWS, is_done

if TYPE_CHECKING:
    from grpo_bench.config.expected_compute import ComputeShape


def cell_record(cell_dir: Path) -> tuple[str, float, dict] | None:
    """(machine, trainer wall seconds, stored run config) of a finished cell, None when its files do not say (data
    read back from disk is untrusted: anything unreadable or implausible is skipped, never raised)."""
    if not (is_done(cell_dir) and (cell_dir / ROWS).is_file()):
        return None
    try:
        table = read_table(cell_dir / ROWS, columns=["kind", "metric", "value", "text"])
        row = table[table["kind"].eq("cell").fillna(False) & table["metric"].eq("wall_time").fillna(False)].iloc[0]
        info = json.loads(row["text"])
        seconds, config, where = float(row["value"]), dict(info["config"]), str(info["machine"])
        updates = int(config["updates"])
    except Exception:  # a torn, foreign or pre-machine file: this cell does not inform the pace
        return None
    if not (seconds > 0 and updates > 0 and seconds == seconds and seconds != float("inf")):
        return None
    return where, seconds, config


def cell_cost(cell_dir: Path) -> tuple[str, float, int] | None:
    """(machine, trainer wall seconds, updates) of a finished cell, None when its files do not say."""
    record = cell_record(cell_dir)
    return None if record is None else (record[0], record[1], int(record[2]["updates"]))


def _cells_here(folders: Iterable[Path]) -> Iterator[tuple[float, dict]]:
    """(wall seconds, stored config) of every finished cell directly under ``folders`` that ran on this host."""
    here = host() + ","
    for folder in folders:
        if not Path(folder).is_dir():
            continue
        for cell_dir in Path(folder).iterdir():
            record = cell_record(cell_dir) if cell_dir.is_dir() else None
            if record is not None and record[0].startswith(here):
                yield record[1], record[2]


def measured_pace(folders: Iterable[Path]) -> float | None:
    """Seconds per update on one worker of this host, over the finished cells of ``folders`` that ran here; None
    when none did."""
    seconds = updates = 0.0
    for wall, config in _cells_here(folders):
        seconds, updates = seconds + wall, updates + int(config["updates"])
    return seconds / updates if updates else None


def run_passes(shape: ComputeShape) -> int:
    """Sample-step passes a whole run of ``shape`` makes (train/compute.py's unit, evaluations and diagnostics
    included): the closed form the trainer's own counters are tested against."""
    from grpo_bench.config.expected_compute import expected
    from grpo_bench.config.metrics import COMPUTE_COUNTS

    totals = expected(shape, shape.cadence.updates)
    return int(sum(totals[k] for k in COMPUTE_COUNTS))


def pass_pace(folders: Iterable[Path], model: str) -> tuple[float, int] | None:
    """(seconds per sample-step pass, cells that measured it) over the finished cells of ``model`` in ``folders``
    that ran on this host; None when none did. A pass, not an update, is the unit so that cells of another
    budget (group size, sampler steps, evaluation cadence) measure a run of this one."""
    from grpo_bench.config.expected_compute import ComputeShape
    from grpo_bench.config.run import from_dict, resolve
    from grpo_bench.config.sections import section
    from grpo_bench.world.roles import video_world

    world = video_world().model
    seconds = passes = 0.0
    cells = 0
    for wall, stored in _cells_here(folders):
        if str(stored.get("model", world)) != model:  # a config without the key ran the default model
            continue
        try:
            count = run_passes(section(resolve(from_dict(stored)), ComputeShape))
        except Exception:  # a config of an older or foreign release: it measures nothing here
            continue
        if count > 0:
            seconds, passes, cells = seconds + wall, passes + count, cells + 1
    return (seconds / passes, cells) if passes else None
