"""The `grpo-bench` command line (typer)."""

from grpo_bench.cli.commands import app, main

__all__ = ["app", "main"]
