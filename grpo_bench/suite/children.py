"""The runner's child processes (pool workers, ``accelerate launch``) die with it.

An orphan that outlived a killed runner could finish a cell that a restarted runner is running again.
"""

from __future__ import annotations

import sys


def die_with_parent() -> None:
    """Linux: SIGKILL this worker when the runner dies, so an orphan never finishes a cell twice."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
