"""Multi-process launches in tests, each on a rendezvous port of its own: two launches (on two xdist workers, or one
right after another while the last one's port is still held) never meet on the default 29500, which one run of the
README's `pytest -n 2` found taken (EADDRINUSE)."""

from __future__ import annotations

import socket
import sys


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch() -> list[str]:
    """``python -m accelerate.commands.launch`` with a main-process port of its own (add the launch's flags)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port())]


def torch_run() -> list[str]:
    """``python -m torch.distributed.run`` with a rendezvous port of its own."""
    return [sys.executable, "-m", "torch.distributed.run", "--master_port", str(free_port())]
