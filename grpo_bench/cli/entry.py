"""The ``grpo-bench`` app (docs/design.md §6) and ``main()``, the console-script entry point.

Every command is registered here, in the order ``--help`` lists them; each module named below only
declares its commands' arguments. ``main()`` turns a user mistake (UserError, a missing optional part,
a path that cannot be written) into one line and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from grpo_bench.cli.pretrain_commands import pretrain_app
from grpo_bench.cli.report_commands import claims, compare, report, suites
from grpo_bench.cli.sampling_commands import methods, sample, samplers
from grpo_bench.cli.score import score
from grpo_bench.cli.terminal import error_line, warning_line
from grpo_bench.cli.train_cost import BUDGET_HELP as TRAIN_BUDGET_HELP
from grpo_bench.cli.training_commands import ablate, plan, restore, run, train, tune
from grpo_bench.errors import UserError
from grpo_bench.study.cli import study_app

app = typer.Typer(
    name="grpo-bench",
    help="Benchmark and ablation harness for GRPO-style RL of flow-matching video generators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from grpo_bench import __version__

        typer.echo(f"grpo-bench {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, metavar="",
                                 help="Print the version and exit."),
) -> None:
    """Benchmark and ablation harness for GRPO-style RL of flow-matching video generators."""


app.command()(methods)
app.command()(samplers)
app.add_typer(pretrain_app, name="pretrain")
app.add_typer(study_app, name="study")  # grpo-bench study export|serve|analyze
app.command()(sample)
app.command()(score)
app.command(epilog=TRAIN_BUDGET_HELP)(train)
app.command()(run)
app.command()(suites)
app.command()(tune)
app.command()(restore)
app.command()(plan)
app.command()(ablate)
app.command()(report)
app.command()(compare)
app.command()(claims)


def main() -> None:
    import warnings

    warnings.showwarning = warning_line  # the command line only: library users keep Python's own
    try:
        app()
    except UserError as exc:
        error_line(str(exc), prefix="error: ")
        sys.exit(2)
    except ModuleNotFoundError as exc:  # an optional part (or a dependency) that is not installed
        from grpo_bench.extras import missing_line

        line = missing_line(exc)
        if line is None:  # a module we do not know how to install: a bug, keep its traceback
            raise
        error_line(line, prefix="error: ")
        sys.exit(2)
    except (PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError, OSError) as exc:
        from grpo_bench.atomic import is_disk_full

        if not (is_disk_full(exc) or isinstance(exc, (PermissionError, NotADirectoryError, IsADirectoryError,
                                                      FileExistsError)) or exc.errno in (36,)):  # 36: ENAMETOOLONG
            raise
        where = f" {exc.filename}" if exc.filename else ""
        error_line(f"cannot write{where}: {exc.strerror or exc}", prefix="error: ")
        sys.exit(2)
