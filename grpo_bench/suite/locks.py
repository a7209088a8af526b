"""Locks and leftovers of a suite folder: one runner per folder, one process per cell.

Locks are ``flock``s, tied to the holding process: the kernel releases them when it dies, so a lock
is never stale. A lock file is removed by its holder on release (a rerun finds none); a process
that opened the file just before it was removed re-checks that it locked the file now on disk.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from grpo_bench.atomic import clean_temp
from grpo_bench.errors import UserError


def _try_flock(path: Path) -> Any | None:
    """An open file holding an exclusive flock on ``path``, or None if another process holds it. The
    lock is tied to the process: it is released when the holder dies, so no lock is ever stale."""
    while True:
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return None
        try:  # the holder may have removed the file between our open and flock: lock the current one
            if os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino:
                return fh
        except FileNotFoundError:
            pass
        fh.close()


def _release(fh: Any, path: Path) -> None:
    """Remove the lock file, then release it (a rerun finds no lock file left behind)."""
    try:
        path.unlink(missing_ok=True)
    finally:
        fh.close()


class SuiteLock:
    """One runner per suite folder: ``.runner.lock`` is flocked and names the holder (pid, host)."""

    NAME = ".runner.lock"

    def __init__(self, suite_dir: Path) -> None:
        self.path = Path(suite_dir) / self.NAME
        self.fh: Any = None

    def acquire(self) -> SuiteLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = _try_flock(self.path)
        if self.fh is None:
            try:
                holder = self.path.read_text().strip() or "unknown process"
            except OSError:
                holder = "unknown process"
            raise UserError(f"{self.path.parent}: another runner is using this suite folder ({holder}); "
                            "wait for it to finish, or stop it, then rerun")
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"pid {os.getpid()} on host {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        self.fh.flush()
        return self

    def release(self) -> None:
        if self.fh is not None:
            _release(self.fh, self.path)
            self.fh = None

    def __enter__(self) -> SuiteLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def cell_busy(cdir: Path) -> bool:
    """True when a process holds the cell's lock (it is training it now)."""
    if not (cdir / ".lock").is_file():
        return False
    fh = _try_flock(cdir / ".lock")
    if fh is None:
        return True
    fh.close()  # keep the file: whoever created it may be about to lock it
    return False


def clean_stale(cdir: Path) -> None:
    """Temp files and checkpoint temp folders a killed writer left (never read; removed on start)."""
    for folder in (cdir, cdir / "samples"):
        clean_temp(folder)
    for tmp in (cdir / "checkpoints").glob(".tmp-update_*"):
        shutil.rmtree(tmp, ignore_errors=True)
