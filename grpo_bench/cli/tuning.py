"""The work behind ``grpo-bench tune`` and the tuning step of ``run`` (suite/tune.py, suite/selection.py)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grpo_bench.cpu_kernels import for_suite
from grpo_bench.errors import UserError
from grpo_bench.suite.live import JobPhases
from grpo_bench.suite.runner import TRAINER
from grpo_bench.suite.spec import Suite


def _run_tuning(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
                console: Console, trainer: str = TRAINER, phases: JobPhases | None = None) -> tuple[dict | None, int]:
    """Run (or list) the tuning grid seed-major and, when every cell is done, choose and write chosen.json."""
    from grpo_bench.cli.suite import execute, exit_code
    from grpo_bench.suite import selection
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.results import load_results
    from grpo_bench.suite.tune import cell_row, seed_major, tuned_rows, tuning_suite

    grid = tuning_suite(suite)
    table_rows = tuned_rows(suite)
    keys = suite.tune.keys()
    cells = seed_major(expand(grid), tuple(keys))
    rows = {c.id: cell_row(table_rows, c.labels, set(keys)) for c in cells}
    summary = execute(grid, out, jobs, backend, dry_run, resume, console, cells=cells, render=False, trainer=trainer,
                      phases=(phases, "tuning grid") if phases else None)
    if dry_run:  # a finished grid's stored choice lets a dry run list the table's cells too
        return _stored_choice(out / grid.name, cells, keys, rows), 0
    code = exit_code(summary)
    if code:
        return None, code
    frame = load_results(out / grid.name)
    learning = selection.cell_learning(_with_grid(frame), suite.tune.select, keys)
    learning = learning[learning["cell"].isin({c.id for c in cells})]
    learning = learning.assign(row=learning["cell"].map(rows))
    chosen = selection.choose(learning, selection.grid_points(cells, keys, rows), suite.tune.seeds,
                              suite.tune.select)
    chosen["suite"], chosen["cells"], chosen["rows"] = suite.name, [c.id for c in cells], rows
    path = selection.write_chosen(out / grid.name, chosen)
    from grpo_bench.report.render import render_report

    report = render_report(out / grid.name, frame=frame)
    _print_chosen(chosen, console)
    console.print(f"chosen points: {path}; tuning report: {report}", markup=False, highlight=False)
    return chosen, 0


def _stored_choice(tuning_dir: Path, cells: list, keys: list[str], rows: dict[str, str]) -> dict | None:
    """``chosen.json`` when it was written from exactly these cells and every one of them is done, else None;
    a stored choice whose points are not the grid's is refused (one line), never run."""
    from grpo_bench.suite.run_folder import is_done
    from grpo_bench.suite.selection import CHOSEN, check_chosen, grid_points, read_chosen

    cell_ids = [c.id for c in cells]
    chosen = read_chosen(tuning_dir)
    if chosen is None or chosen.get("cells") != cell_ids or not all(is_done(tuning_dir / c) for c in cell_ids):
        return None
    return check_chosen(chosen, tuning_dir / CHOSEN, grid_points(cells, keys, rows))


def _with_grid(frame):
    from grpo_bench.report import data

    return data.with_grid_columns(frame)


def _point(point: dict) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())


def _print_chosen(chosen: dict, console: Console) -> None:
    table = Table(title=f"{chosen['suite']}: chosen points ({chosen['rule']})")
    for col in ("row", "chosen", "learning", "grid (mean over tuning seeds)"):
        table.add_column(col)
    for row, entry in chosen["methods"].items():
        grid = ", ".join(f"{_point(g['point'])}: {g['mean']:+.3f}" for g in entry["grid"])
        # a reading's row is "sage_grpo [kl=dual]": as markup, rich would swallow its bracket as a style tag
        table.add_row(escape(row), _point(entry["chosen"]), f"{entry['score']:+.3f}", grid)
    console.print(table)


def tuned_suite(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
                console: Console, trainer: str = TRAINER, phases: JobPhases | None = None) -> tuple[Suite | None, int]:
    """The suite with each method at its chosen point (tuning first, resumably), a suite without a tune block as
    it is; (None, exit code) when the tuning grid is not finished (interrupted, a failed cell), and on a dry run
    unless the grid is finished and its ``chosen.json`` stored (then the table at those points, nothing written)."""
    if suite.tune is None:
        return suite, 0
    from grpo_bench.atomic import atomic_write_json
    from grpo_bench.suite.selection import TUNED, chosen_points
    from grpo_bench.suite.tune import with_chosen

    chosen, code = _run_tuning(suite, out, jobs, backend, dry_run, resume, console, trainer, phases)
    if chosen is None:
        if dry_run:
            _print_table_after_tuning(suite, out, console)
        return None, code
    tuned = with_chosen(suite, chosen_points(chosen))
    if not dry_run:
        atomic_write_json(out / suite.name / TUNED, chosen)  # which points the table ran, beside its results
    return tuned, 0


def _print_table_after_tuning(suite: Suite, out: Path, console: Console) -> None:
    """A dry run before the grid is chosen: the table's cells as they will run, each method's tuned keys still open
    (their ids follow from the chosen points, so none is shown)."""
    from grpo_bench.suite.expand import expand

    cells = expand(suite)
    keys = ", ".join(suite.tune.keys()) if suite.tune else ""
    table = Table(title=f"{suite.name}: {len(cells)} cells after tuning -> {out / suite.name} (each method at the "
                        f"{keys} the tuning grid chooses)")
    for col in ("cell", "setting", "run", "seed", "updates", "status"):
        table.add_column(col)
    for c in cells:
        table.add_row("-", c.config.setting, c.group, str(c.config.seed), str(c.config.updates), "after tuning")
    console.print(table)


def job_phases(suite: Suite, out: Path, console: Console) -> JobPhases:
    """The main job's two phases as one view: the tuning grid's cells, then the table's (their count and updates
    do not depend on the chosen points); the pace of cells finished here before starts the ETA."""
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.pace import measured_pace
    from grpo_bench.suite.tune import tuning_suite

    grid, table = expand(tuning_suite(suite)), expand(suite)
    return JobPhases(suite.name, console, [(len(grid), sum(c.config.updates for c in grid)),
                                           (len(table), sum(c.config.updates for c in table))],
                     measured_pace=measured_pace([out / tuning_suite(suite).name, out / suite.name]))


def tune_command(path: Path, jobs: int | None, backend: str, out: Path, dry_run: bool, resume: bool,
                 overrides: list[str], console: Console) -> int:
    from grpo_bench.config.run import parse_overrides
    from grpo_bench.report.suite_parts import load_suite_checked

    suite = for_suite(load_suite_checked(path, parse_overrides(overrides)))
    if suite.tune is None:
        raise UserError(f"{path}: no tune block; add one (docs/suites.md, 'Tuning'), e.g. tune: {{grid: {{lr: "
                        "[3.0e-5, 1.0e-4, 3.0e-4, 1.0e-3]}, seeds: [100, 101, 102], family: {setting: A}}")
    _, code = _run_tuning(suite, out, jobs, backend, dry_run, resume, console)
    return code


def run_command(path: Path, jobs: int | None, backend: str, out: Path, dry_run: bool, resume: bool,
                overrides: list[str], console: Console) -> int:
    """``grpo-bench run``: a tuned suite's tuning grid first (it resumes), then its table at the chosen points."""
    from grpo_bench.cli.suite import run_loaded
    from grpo_bench.config.run import parse_overrides
    from grpo_bench.report.suite_parts import load_suite_checked

    loaded = for_suite(load_suite_checked(path, parse_overrides(overrides)))
    phases = job_phases(loaded, out, console) if loaded.tune is not None and not dry_run else None
    suite, code = tuned_suite(loaded, out, jobs, backend, dry_run, resume, console, phases=phases)
    return code if suite is None else run_loaded(suite, out, jobs, backend, dry_run, resume, console,
                                                 phases=(phases, "table") if phases else None)
