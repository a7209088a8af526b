"""The ``grpo-bench`` command line (DESIGN.md §6).

Each command's work lives in its own module; this file only declares arguments. A user mistake
(UserError) prints one line and exits with code 2, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from grpo_bench.errors import UserError

app = typer.Typer(
    name="grpo-bench",
    help="Benchmark and ablation harness for GRPO-style RL of flow-matching video generators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


@app.command()
def methods() -> None:
    """List registered methods with their kernels and defaults, and the KL variants."""
    from grpo_bench.report.methods_table import print_methods

    print_methods(console)


@app.command()
def samplers(
    steps: int = typer.Option(10, "--steps", help="Sampler steps T."),
    shift: float = typer.Option(3.0, "--shift", help="Schedule shift."),
    data_std: float = typer.Option(0.5, "--data-std", help="Std s of the Gaussian data N(0, s^2 I)."),
    out: Path = typer.Option(Path("reports/samplers"), "--out", help="Folder for Table 1 and Figure 1."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write per-step std and variance errors as JSON."),
) -> None:
    """Table 1 / Figure 1: noise each kernel injects, and its marginal-variance error (exact Gaussian model)."""
    from grpo_bench.samplers import run_samplers_report

    run_samplers_report(steps=steps, shift=shift, data_std=data_std, out=out, json_path=json_path, console=console)


def main() -> None:
    try:
        app()
    except UserError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
