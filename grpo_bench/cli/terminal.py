"""What every command prints besides its own output: the two consoles, an error or a warning as one line,
and Ctrl-C as one line and exit code 130."""

from __future__ import annotations

import os
import sys

from rich.console import Console

MAX_ERROR_CHARS = 500
"""An error is one line: longer messages (a 10 MB prompt echoed back) are cut."""


def _console(stderr: bool = False) -> Console:
    """A terminal gets its own width; a pipe or file gets wide lines instead of rich's 80 columns,
    so tables (``sample`` scores, ``methods`` headers) are never cut."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=200 if wide else None)


console = _console()
err_console = Console(stderr=True)


def error_line(message: str, prefix: str = "") -> None:
    """Print ``message`` literally (never as rich markup) on one line, cut to MAX_ERROR_CHARS."""
    from rich.text import Text

    text = " ".join(str(message).split("\n"))
    if len(text) > MAX_ERROR_CHARS:
        text = f"{text[:MAX_ERROR_CHARS]}… ({len(text) - MAX_ERROR_CHARS} more characters)"
    style = "bold yellow" if prefix.startswith("warning") else "bold red"
    line = Text(prefix, style=style) + Text(text) if prefix else Text(text)
    err_console.print(line, highlight=False, soft_wrap=True)


def warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, file=None,
                 line=None) -> None:
    """A warning on the command line is one line for the user, not Python's file:line and source line."""
    error_line(str(message), prefix="warning: ")


def interruptible(work) -> int:
    """Exit code of ``work()``; 130 (one line, no traceback) when Ctrl-C stopped it."""
    from grpo_bench import interrupt

    try:
        code = work()
        return code if isinstance(code, int) else 0
    except interrupt.Interrupted as exc:  # a single run stopped at a checkpoint (train)
        from grpo_bench.cli.suite import resume_command

        error_line(f"interrupted: {exc}; resume with: {resume_command()}")
        return interrupt.EXIT_CODE
    except KeyboardInterrupt:  # the second Ctrl-C: stopped at once
        error_line("stopped at once (second Ctrl-C); rerun the same command to resume from the last checkpoint")
        return interrupt.EXIT_CODE
