"""A failed multi-process launch read back as one line: the first error a launched process printed (a user error's
``error: ...`` line or a traceback's last line), with its rank. Read by the one-command launch
(train/distributed.py) and the suite's multi-GPU cells (suite/accelerate_launch.py)."""

from __future__ import annotations

import re
from pathlib import Path

_EXC = re.compile(r"^(?:\[rank(\d+)\]:\s*)?"
                  r"((?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)|error): (.+)$")
_LAUNCHER = ("ChildFailedError", "torch.distributed.elastic", "SignalException")


def first_error(log: str) -> str | None:
    """The first error a launched process printed (a one-line ``error: ...`` user error, or the last
    line of its traceback: ``SomeError: message``), as ``rank N: SomeError: message``; the
    launcher's own summary (ChildFailedError) is skipped. None when the log holds no error line."""
    for line in log.splitlines():
        m = _EXC.match(line.strip())
        if m and not any(x in line for x in _LAUNCHER):
            rank = f"rank {m.group(1)}: " if m.group(1) else ""
            return f"{rank}{m.group(2)}: {m.group(3).strip()}"
    return None


class LaunchError(RuntimeError):
    """A multi-process launch failed; the message is one line: the first error and the log path."""


def launch_failure(returncode: int, log_path: Path) -> LaunchError:
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    first = first_error(text) or f"accelerate launch exited with {returncode}"
    return LaunchError(f"{first} (all ranks' output: {log_path})")
