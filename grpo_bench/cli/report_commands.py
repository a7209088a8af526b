"""``grpo-bench report``, ``compare`` and ``claims``: render what finished runs and suites hold.

Only arguments are declared here (registered on the app in ``grpo_bench.cli.entry``); the work lives in
``grpo_bench.cli.suite`` and ``grpo_bench.cli.claims``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from grpo_bench.cli.terminal import console
from grpo_bench.errors import UserError

_REPORT_HELP = ("A suite's run folder (runs/<suite>: finished cells so far, even while it runs), a train run "
                "folder or a results.parquet; two or more are put side by side.")


def _report_inputs(run_dirs: list[Path], out: Path | None) -> None:
    """Every input is a folder or a results.parquet, and the report folder can be written: checked first."""
    from grpo_bench import preflight

    for run_dir in run_dirs:
        if run_dir.exists() and not run_dir.is_dir() and run_dir.suffix != ".parquet":
            raise UserError(f"report: {str(run_dir)!r} is not a folder or a results.parquet "
                            "(give a suite's run folder, e.g. runs/main_table)")
    if out is not None:
        preflight.out_dir(out, "report folder")
    elif len(run_dirs) == 1 and run_dirs[0].is_dir():
        preflight.out_dir(run_dirs[0] / "report", "report folder")


def report(
    run_dirs: list[Path] = typer.Argument(..., help=_REPORT_HELP),
    out: Path | None = typer.Option(
        None, "--out", help="Report folder (default: RUN_DIR/report; several: runs/compare/A_vs_B)."),
    parts_from: Path | None = typer.Option(
        None, "--parts-from", help="Render the report section of this suite file (its tables, figures, baseline) "
        "instead of the one stored with the results: a table stored before a part existed gets it. The suite "
        "must be the one that ran the results."),
) -> None:
    """Render tables, figures and report.md from whatever RUN_DIR holds (several: side by side)."""
    from grpo_bench.cli.suite import report_command

    _report_inputs(run_dirs, out)
    if parts_from is not None and len(run_dirs) != 1:
        raise UserError("report: --parts-from renders one suite's results; give one RUN_DIR")
    raise typer.Exit(report_command(run_dirs, out, console, parts_from))


def compare(
    first: Path = typer.Argument(..., help="A suite run folder, a train run folder or a results.parquet."),
    second: Path = typer.Argument(..., help="The other one."),
    out: Path | None = typer.Option(None, "--out", help="Report folder (default: runs/compare/A_vs_B)."),
) -> None:
    """Two runs or suites side by side in one report (tables and figures label each row with its source)."""
    from grpo_bench.cli.suite import report_command

    _report_inputs([first, second], out)
    raise typer.Exit(report_command([first, second], out, console))


def claims(
    reports_dir: Path = typer.Argument(..., help="Folder of stored reports (e.g. reports): <suite>/results.parquet, "
                                       "samplers/, human-study analyses."),
    out: Path | None = typer.Option(None, "--out", help="Ledger file (default: REPORTS_DIR/CLAIMS.md)."),
) -> None:
    """The paper's claims, one row each: the suite and comparison that test it, the measured effect with its
    interval and a verdict (supported / contradicted / undecided), from the stored results alone."""
    from grpo_bench.cli.claims import claims_command

    raise typer.Exit(claims_command(reports_dir, out, console))


def suites(
    folder: Path | None = typer.Option(
        None, "--suites", help="Suites folder (default: ./suites, else the checkout's)."),
    runs: Path = typer.Option(Path("runs"), "--runs", help="Runs folder whose finished cells measure this machine."),
    reports: Path = typer.Option(Path("reports"), "--reports", help="Stored reports (their cells' measured minutes)."),
) -> None:
    """List every suite with its cells and a cost measured on this machine (runs/), else where its stored results
    were measured (reports/)."""
    from grpo_bench.cli.suite import suites_dir
    from grpo_bench.cli.suites_list import suites_command

    folder = folder if folder is not None else suites_dir()
    if not folder.is_dir():
        raise UserError(f"--suites: {folder} is not a folder; give the folder holding the suite YAML files")
    raise typer.Exit(suites_command(folder, runs, reports, console))
