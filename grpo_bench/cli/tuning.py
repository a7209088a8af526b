"""The work behind ``grpo-bench tune`` and the tuning step of ``run`` (suite/tune.py, suite/selection.py)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from grpo_bench.errors import UserError
from grpo_bench.suite.runner import TRAINER
from grpo_bench.suite.spec import Suite


def _run_tuning(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
                console: Console, trainer: str = TRAINER) -> tuple[dict | None, int]:
    """Run (or list) the tuning grid seed-major and, when every cell is done, choose and write chosen.json."""
    from grpo_bench.cli.suite import execute, exit_code
    from grpo_bench.suite import selection
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.results import load_results
    from grpo_bench.suite.tune import seed_major, tuning_suite

    grid = tuning_suite(suite)
    cells = seed_major(expand(grid))
    summary = execute(grid, out, jobs, backend, dry_run, resume, console, cells=cells, render=False, trainer=trainer)
    if dry_run:  # a finished grid's stored choice lets a dry run list the table's cells too
        return _stored_choice(out / grid.name, cells, suite.tune.keys()), 0
    code = exit_code(summary)
    if code:
        return None, code
    keys = suite.tune.keys()
    frame = load_results(out / grid.name)
    learning = selection.cell_learning(_with_grid(frame), suite.tune.select, keys)
    learning = learning[learning["cell"].isin({c.id for c in cells})]
    chosen = selection.choose(learning, selection.grid_points(cells, keys), suite.tune.seeds, suite.tune.select)
    chosen["suite"], chosen["cells"] = suite.name, [c.id for c in cells]
    path = selection.write_chosen(out / grid.name, chosen)
    from grpo_bench.report.render import render_report

    report = render_report(out / grid.name, frame=frame)
    _print_chosen(chosen, console)
    console.print(f"chosen points: {path}; tuning report: {report}", markup=False, highlight=False)
    return chosen, 0


def _stored_choice(tuning_dir: Path, cells: list, keys: list[str]) -> dict | None:
    """``chosen.json`` when it was written from exactly these cells and every one of them is done, else None;
    a stored choice whose points are not the grid's is refused (one line), never run."""
    from grpo_bench.suite.run_folder import is_done
    from grpo_bench.suite.selection import CHOSEN, check_chosen, grid_points, read_chosen

    cell_ids = [c.id for c in cells]
    chosen = read_chosen(tuning_dir)
    if chosen is None or chosen.get("cells") != cell_ids or not all(is_done(tuning_dir / c) for c in cell_ids):
        return None
    return check_chosen(chosen, tuning_dir / CHOSEN, grid_points(cells, keys))


def _with_grid(frame):
    from grpo_bench.report import data

    return data.with_grid_columns(frame)


def _point(point: dict) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())


def _print_chosen(chosen: dict, console: Console) -> None:
    table = Table(title=f"{chosen['suite']}: chosen points ({chosen['rule']})")
    for col in ("method", "chosen", "learning", "grid (mean over tuning seeds)"):
        table.add_column(col)
    for method, entry in chosen["methods"].items():
        grid = ", ".join(f"{_point(g['point'])}: {g['mean']:+.3f}" for g in entry["grid"])
        table.add_row(method, _point(entry["chosen"]), f"{entry['score']:+.3f}", grid)
    console.print(table)


def tuned_suite(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
                console: Console, trainer: str = TRAINER) -> tuple[Suite | None, int]:
    """The suite with each method at its chosen point (tuning first, resumably), a suite without a tune block as
    it is; (None, exit code) when the tuning grid is not finished (interrupted, a failed cell), and on a dry run
    unless the grid is finished and its ``chosen.json`` stored (then the table at those points, nothing written)."""
    if suite.tune is None:
        return suite, 0
    from grpo_bench.atomic import atomic_write_json
    from grpo_bench.suite.selection import TUNED, chosen_points
    from grpo_bench.suite.tune import with_chosen

    chosen, code = _run_tuning(suite, out, jobs, backend, dry_run, resume, console, trainer)
    if chosen is None:
        if dry_run:
            console.print(f"{suite.name}: the table's cells follow from the tuning grid's chosen points "
                          f"(`grpo-bench tune {suite.path}` first)", markup=False, highlight=False)
        return None, code
    tuned = with_chosen(suite, chosen_points(chosen))
    if not dry_run:
        atomic_write_json(out / suite.name / TUNED, chosen)  # which points the table ran, beside its results
    return tuned, 0


def tune_command(path: Path, jobs: int | None, backend: str, out: Path, dry_run: bool, resume: bool,
                 overrides: list[str], console: Console) -> int:
    from grpo_bench.suite.parse import load_suite
    from grpo_bench.train.config import parse_overrides

    suite = load_suite(path, parse_overrides(overrides))
    if suite.tune is None:
        raise UserError(f"{path}: no tune block; add one (docs/suites.md, 'Tuning'), e.g. tune: {{grid: {{lr: "
                        "[3.0e-5, 1.0e-4, 3.0e-4, 1.0e-3]}, seeds: [100, 101, 102], family: {setting: A}}")
    _, code = _run_tuning(suite, out, jobs, backend, dry_run, resume, console)
    return code


def run_command(path: Path, jobs: int | None, backend: str, out: Path, dry_run: bool, resume: bool,
                overrides: list[str], console: Console) -> int:
    """``grpo-bench run``: a tuned suite's tuning grid first (it resumes), then its table at the chosen points."""
    from grpo_bench.cli.suite import run_loaded
    from grpo_bench.suite.parse import load_suite
    from grpo_bench.train.config import parse_overrides

    suite, code = tuned_suite(load_suite(path, parse_overrides(overrides)), out, jobs, backend, dry_run, resume,
                              console)
    return code if suite is None else run_loaded(suite, out, jobs, backend, dry_run, resume, console)
