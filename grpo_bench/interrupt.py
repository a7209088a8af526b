"""Ctrl-C as a request to stop at a safe point.

The first SIGINT sets a flag; training loops (the trainer, the suite runner's progress callback) look
at it after each update, write a checkpoint and raise ``Interrupted``. A second SIGINT stops at once
(``KeyboardInterrupt``). Suite workers ignore SIGINT themselves and watch a flag shared with the
runner (``attach``), so a stop reaches them whether the terminal signalled the whole process group
or only the runner.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

EXIT_CODE = 130
"""The shell's code for a run ended by SIGINT."""


class Interrupted(Exception):
    """A run stopped at a safe point after Ctrl-C (its state is saved; rerunning the command resumes)."""


_local = threading.Event()
_shared: Any = None


def request() -> None:
    _local.set()
    if _shared is not None:
        _shared.set()


def requested() -> bool:
    return _local.is_set() or (_shared is not None and _shared.is_set())


def attach(event: Any) -> None:
    """Watch ``event`` (a multiprocessing Event shared with the runner) as well as the local flag."""
    global _shared
    _shared = event


def reset() -> None:
    global _shared
    _local.clear()
    _shared = None


@contextlib.contextmanager
def first_stops_second_kills(on_first: Callable[[], None] = lambda: None,
                             on_second: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Inside the block: the first SIGINT calls ``request`` and ``on_first``; the second calls
    ``on_second`` and raises KeyboardInterrupt. Outside the main thread it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if requested():
            signal.signal(signal.SIGINT, signal.default_int_handler)
            on_second()
            raise KeyboardInterrupt
        request()
        on_first()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
