"""The live view of a running suite: cells done/total, each worker's cell and update, and an ETA.

Workers send small tuples; the runner feeds them to a display:
``("start", slot, cell, group, seed, total_updates)``, ``("update", slot, cell, update, total, reward)``,
``("end", slot, cell, status, seconds)``; ``update`` counts the updates completed (1-based, as the
trainer's progress callback reports). The ETA divides the updates still to run by the update
rate measured so far in this invocation (all workers together).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text


class NullDisplay:
    """Accepts every event and shows nothing (library use, tests)."""

    def begin(self, **_: Any) -> None: ...

    def event(self, event: tuple) -> None: ...

    def refresh(self) -> None: ...

    def finish(self) -> None: ...


@dataclass
class _Slot:
    cell: str = ""
    group: str = ""
    seed: Any = None
    update: int = 0
    total: int = 0
    reward: float | None = None
    since: float = 0.0


@dataclass
class SuiteDisplay:
    """A rich Live table; also logs one line per finished or failed cell."""

    title: str
    console: Console = field(default_factory=Console)
    total: int = 0
    done: int = 0
    failed: int = 0
    slots: dict[int, _Slot] = field(default_factory=dict)
    updates_left: int = 0
    updates_run: int = 0
    t0: float = 0.0
    _live: Live | None = None

    def begin(self, total: int, done: int, jobs: int, updates: list[int]) -> None:
        self.total, self.done, self.t0 = total, done, time.perf_counter()
        self.updates_left = sum(updates)
        self.slots = {i: _Slot() for i in range(jobs)}
        self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def event(self, event: tuple) -> None:
        kind, slot = event[0], event[1]
        s = self.slots.setdefault(slot, _Slot())
        if kind == "start":
            _, _, s.cell, s.group, s.seed, s.total = event
            s.update, s.reward, s.since = 0, None, time.perf_counter()
        elif kind == "update":
            _, _, cell, update, total, reward = event  # update = updates completed so far
            if cell == s.cell:
                new = max(0, update - s.update)  # a resumed cell starts ahead
                self.updates_run += new
                self.updates_left = max(0, self.updates_left - new)
                s.update, s.total = update, total
                s.reward = reward if reward is not None else s.reward
        elif kind == "end":
            _, _, cell, status, seconds = event
            self.updates_left = max(0, self.updates_left - max(0, s.total - s.update))
            if status == "done":
                self.done += 1
            else:
                self.failed += 1
            colour = "green" if status == "done" else "red"
            self.console.log(f"[{colour}]{status}[/] {cell} {s.group} seed={s.seed} ({seconds:.1f} s)")
            self.slots[slot] = _Slot()

    def eta(self) -> float | None:
        elapsed = time.perf_counter() - self.t0
        if self.updates_run == 0 or elapsed <= 0:
            return None
        return self.updates_left / (self.updates_run / elapsed)

    def _render(self) -> Group:
        eta = self.eta()
        head = Text.assemble(
            (f"{self.title}  ", "bold"), f"cells {self.done}/{self.total} done",
            (f", {self.failed} failed" if self.failed else "", "red"),
            f"   elapsed {_clock(time.perf_counter() - self.t0)}   ETA {'?' if eta is None else _clock(eta)}",
        )
        table = Table(box=None, pad_edge=False, show_edge=False)
        for col in ("worker", "cell", "run", "seed", "update", "reward", "time"):
            table.add_column(col)
        for i, s in sorted(self.slots.items()):
            if not s.cell:
                table.add_row(str(i), "[dim]idle[/]", "", "", "", "", "")
                continue
            reward = "" if s.reward is None else f"{s.reward:+.3f}"
            table.add_row(str(i), s.cell, s.group, str(s.seed), f"{s.update}/{s.total}", reward,
                          _clock(time.perf_counter() - s.since))
        return Group(head, table)

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def finish(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
