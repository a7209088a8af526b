"""The main job shows all its phases (issue 45, item 2): one live view and one ETA from the first tuning cell to the
last table cell (suite/live.py JobPhases), the ETA started from cells measured on this machine (suite/pace.py);
``run --dry-run`` lists the table's cells as "after tuning"; ``report`` of a tuned suite mid-tuning renders the
tuning report and says the table has not started."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from suite_support import TRAINER
from tune_support import suite_data
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.errors import UserError
from grpo_bench.suite.expand import expand
from grpo_bench.suite.live import JobPhases
from grpo_bench.suite.machine import host
from grpo_bench.suite.pace import measured_pace
from grpo_bench.suite.parse import parse_suite
from grpo_bench.suite.tune import seed_major, tuning_suite

ROOT = Path(__file__).resolve().parents[2]


def _quiet(tmp_path: Path) -> Console:
    return Console(file=open(tmp_path / "console.txt", "w"), width=200)


def _run_cell(display, slot: int, cell: str, updates: int, seconds: float) -> None:
    display.event(("start", slot, cell, "run", 0, updates))
    for u in range(1, updates + 1):
        display.event(("update", slot, cell, u, updates, 0.0))
    display.event(("end", slot, cell, "done", seconds))


def test_one_eta_spans_the_tuning_grid_and_the_table_after_it(tmp_path):
    """Closed form: 4 tuning cells of 10 updates, then 2 table cells of 15; one worker."""
    phases = JobPhases("job", _quiet(tmp_path), [(4, 40), (2, 30)], measured_pace=2.0)
    grid = phases.display({}, "tuning grid")
    grid.begin(total=4, done=0, jobs=1, updates=[10] * 4)
    assert (grid.total, grid.done, grid.updates_left) == (6, 0, 70)  # the table's cells and updates are in it
    assert grid.eta() == pytest.approx(70 * 2.0)  # before any cell finished: this machine's measured pace
    for i in range(4):
        _run_cell(grid, 0, f"t{i}", 10, seconds=5.0)  # 0.5 s an update in this invocation
    assert grid.done == 4 and grid.eta() == pytest.approx(30 * 0.5)
    grid.finish()
    phases.close(grid)
    table = phases.display({}, "table")
    table.begin(total=2, done=0, jobs=1, updates=[15, 15])
    assert (table.total, table.done, table.updates_left) == (6, 4, 30)  # counts carried from the grid
    assert table.eta() == pytest.approx(30 * 0.5)  # and the pace the grid measured
    assert "phase 2 of 2" in table.title and "table" in table.title
    _run_cell(table, 0, "m0", 15, seconds=15.0)
    assert table.eta() == pytest.approx(15 * (35.0 / 55))  # 20 + 15 s over 40 + 15 updates, both phases together
    table.finish()


def test_the_tuned_job_runs_both_phases_under_one_count(tmp_path):
    from grpo_bench.cli.suite import execute
    from grpo_bench.cli.tuning import job_phases, tuned_suite

    suite = parse_suite(suite_data(), "s.yaml")
    console = _quiet(tmp_path)
    phases = job_phases(suite, tmp_path, console)
    n_grid, n_table = len(expand(tuning_suite(suite))), len(expand(suite))
    assert phases.phases == [(n_grid, 12 * n_grid), (n_table, 12 * n_table)] and phases.measured_pace is None
    tuned, code = tuned_suite(suite, tmp_path, 2, "local", False, True, console, trainer=TRAINER, phases=phases)
    assert code == 0 and phases.index == 1 and phases.earlier_done == n_grid
    execute(tuned, tmp_path, 2, "local", False, True, console, trainer=TRAINER, phases=(phases, "table"))
    assert phases.index == 2 and phases.earlier_done == n_grid + n_table


def _stored_cell(folder: Path, name: str, machine: str, seconds: float, updates: int, done: bool = True) -> None:
    cdir = folder / name
    cdir.mkdir(parents=True)
    text = json.dumps({"machine": machine, "config": {"updates": updates}})
    pd.DataFrame([{"kind": "cell", "metric": "wall_time", "value": seconds, "text": text},
                  {"kind": "final", "metric": "reward", "value": 0.1, "text": None}]).to_parquet(cdir / "rows.parquet")
    if done:
        (cdir / "DONE").write_text("")


def test_the_pace_is_measured_by_finished_cells_of_this_machine_only(tmp_path):
    here = f"{host()}, no GPU, torch x, Linux y"
    _stored_cell(tmp_path / "a_tune", "c1", here, 100.0, 50)
    _stored_cell(tmp_path / "a", "c2", here, 60.0, 10)
    _stored_cell(tmp_path / "a", "c3", "Another CPU, 64 CPUs, no GPU, torch x", 1.0, 100)  # restored from elsewhere
    _stored_cell(tmp_path / "a", "c4", here, 1.0, 100, done=False)  # unfinished: its wall time is partial
    (tmp_path / "a" / "c5").mkdir()
    (tmp_path / "a" / "c5" / "DONE").write_text("")
    (tmp_path / "a" / "c5" / "rows.parquet").write_text("torn")  # unreadable: skipped, never raised
    assert measured_pace([tmp_path / "a_tune", tmp_path / "a", tmp_path / "missing"]) == pytest.approx(160 / 60)
    assert measured_pace([tmp_path / "missing"]) is None


def test_dry_run_of_the_main_job_lists_the_table_after_the_tuning_grid(tmp_path):
    from grpo_bench.suite.parse import load_suite

    suite = load_suite(ROOT / "suites" / "main_table.yaml")
    result = CliRunner().invoke(app, ["run", str(ROOT / "suites" / "main_table.yaml"), "--dry-run", "--out",
                                      str(tmp_path / "runs")], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    n_grid, n_table = len(expand(tuning_suite(suite))), len(expand(suite))
    assert f"main_table_tune: {n_grid} cells" in result.output
    assert f"main_table: {n_table} cells after tuning" in result.output
    assert result.output.count("after tuning │") == n_table and result.output.count("pending") == n_grid
    assert not (tmp_path / "runs").exists()


def test_report_of_a_tuned_suite_mid_tuning_renders_the_tuning_report(tmp_path):
    from grpo_bench.suite.runner import run_suite

    suite = parse_suite(suite_data(), "s.yaml")
    grid = tuning_suite(suite)
    run_suite(grid, seed_major(expand(grid))[:4], tmp_path, jobs=2, trainer=TRAINER)  # 4 tuning cells so far
    result = CliRunner().invoke(app, ["report", str(tmp_path / "tuned")], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "tuned_tune" / "report" / "report.md").is_file()
    assert "has not started" in result.output and str(tmp_path / "tuned_tune" / "report") in result.output
    assert not (tmp_path / "tuned").exists()
    # a folder that is no tuned suite's table is still "not found"
    missing = CliRunner().invoke(app, ["report", str(tmp_path / "other")])
    assert isinstance(missing.exception, UserError) and "not found" in str(missing.exception)
