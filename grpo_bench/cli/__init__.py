"""The `grpo-bench` command line (typer): the app and its entry point live in ``grpo_bench.cli.entry``."""

from grpo_bench.cli.entry import app, main

__all__ = ["app", "main"]
