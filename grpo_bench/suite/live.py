"""The live view of a running suite on ``rich.progress``: one bar for the suite (cells done/total,
elapsed, ETA) and one row per worker (cell, setting, run, seed, update, reward).

Workers send small tuples; the runner feeds them to a display:
``("start", slot, cell, group, seed, total_updates)``, ``("update", slot, cell, update, total, reward)``,
``("end", slot, cell, status, seconds)``; ``update`` counts the updates completed (1-based, as the
trainer's progress callback reports).

The ETA divides the updates still to run by the pace of the cells finished in this invocation
(their seconds per update, all workers together); before the first cell finishes it uses the update
rate measured so far. Finished cells measure whole-cell cost (evaluation, checkpoints, start-up),
which the per-update rate of the first minutes misses. Before that, a pace measured on this machine by the
job's cells finished earlier (suite/pace.py) stands in.

A job of several phases (``run`` of a tuned suite: the tuning grid, then the table at the chosen points) shows
one view through ``JobPhases``: every phase's bar counts the cells and updates of the phases still to come, and
each phase starts from the counts and pace the one before it measured, so one ETA runs from the first tuning
cell to the last table cell.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

STOPPED = "interrupted"
"""The end status of a cell that Ctrl-C stopped at a checkpoint: shown as *stopped*, never as failed."""


class NullDisplay:
    """Accepts every event and shows nothing (library use, tests)."""

    def begin(self, **_: Any) -> None: ...

    def event(self, event: tuple) -> None: ...

    def refresh(self) -> None: ...

    def finish(self) -> None: ...


@dataclass
class _Slot:
    cell: str = ""
    update: int = 0
    first_update: int = 0
    since: float = 0.0
    task: Any = None


class _Count(ProgressColumn):
    """completed/total, blank for an idle worker."""

    def render(self, task: Task) -> Text:
        if task.fields.get("idle"):
            return Text("")
        total = "?" if task.total is None else str(int(task.total))
        return Text(f"{int(task.completed)}/{total}", style="progress.download")


class _Bar(BarColumn):
    """A bar, blank on the header row."""

    def render(self, task: Task) -> Any:
        return Text("") if task.fields.get("header") else super().render(task)


class _Clock(ProgressColumn):
    """Elapsed time of the row (and the suite's ETA on the suite row)."""

    def render(self, task: Task) -> Text:
        eta = task.fields.get("eta")
        elapsed = _clock(task.elapsed or 0.0) if task.fields.get("clock", True) else ""
        return Text(elapsed + ("" if eta is None else f"  ETA {eta}"), style="progress.elapsed")


@dataclass
class SuiteDisplay:
    """The suite's progress bars; also prints one line per finished or failed cell."""

    title: str
    console: Console = field(default_factory=Console)
    settings: dict[str, str] = field(default_factory=dict)
    """cell id -> reward setting, shown in the Setting column (A and B cells look alike otherwise)."""
    total: int = 0
    done: int = 0
    failed: int = 0
    stopped: int = 0
    slots: dict[int, _Slot] = field(default_factory=dict)
    updates_left: int = 0
    updates_run: int = 0
    finished_seconds: float = 0.0
    finished_updates: int = 0
    jobs: int = 1
    t0: float = 0.0
    later_cells: int = 0
    """Cells of the job's phases still to come (a tuned suite's table while its tuning grid runs): in the total."""
    later_updates: int = 0
    """Their updates: in the ETA."""
    earlier_done: int = 0
    """Cells of the job's earlier phases, finished: in the count and the total."""
    measured_pace: float | None = None
    """Seconds per update on one worker, from cells finished on this machine before (suite/pace.py)."""
    _progress: Progress | None = None
    _suite_task: Any = None

    def begin(self, total: int, done: int, jobs: int, updates: list[int]) -> None:
        self.total, self.jobs, self.t0 = total + self.earlier_done + self.later_cells, max(1, jobs), time.perf_counter()
        self.done = done + self.earlier_done
        self.updates_left = sum(updates) + self.later_updates
        self._progress = Progress(
            TextColumn("{task.fields[worker]:>6}"), TextColumn("{task.description}"),
            TextColumn("{task.fields[setting]:^7}"), TextColumn("{task.fields[run]}"),
            TextColumn("{task.fields[seed]:>4}"), _Bar(bar_width=20), _Count(),
            TextColumn("{task.fields[reward]:>7}"), _Clock(),
            console=self.console, refresh_per_second=4, transient=False,
        )
        # a row of its own names the columns: the suite's row below it holds only the suite's counts
        self._progress.add_task("[dim]cell[/]", total=1, worker="worker", setting="setting", run="run", seed="seed",
                                reward="reward", clock=False, idle=True, header=True)
        self._suite_task = self._progress.add_task(
            f"[bold]{self.title}[/]", total=max(total, 1), completed=done, worker="suite", setting="",
            run="", seed="", reward="", eta="?")
        self.slots = {}
        for i in range(jobs):
            task = self._progress.add_task("[dim]idle[/]", total=1, worker=str(i), setting="", run="", seed="",
                                           reward="", clock=False, idle=True)
            self.slots[i] = _Slot(task=task)
        self._progress.start()

    def event(self, event: tuple) -> None:
        kind, slot = event[0], event[1]
        s = self.slots.setdefault(slot, _Slot())
        if kind == "start":
            _, _, cell, group, seed, total = event
            s.cell, s.update, s.first_update, s.since = cell, 0, 0, time.perf_counter()
            if self._progress is not None and s.task is not None:
                self._progress.reset(s.task, total=total, completed=0)
            self._task(s, description=cell, setting=self.settings.get(cell, ""), run=group, seed=str(seed),
                       reward="", clock=True, idle=False)
        elif kind == "update":
            _, _, cell, update, total, reward = event  # update = updates completed so far
            if cell == s.cell:
                if s.update == 0 and s.first_update == 0 and update > 1:
                    s.first_update = update - 1  # a resumed cell starts ahead: those updates are not left
                    self.updates_left = max(0, self.updates_left - s.first_update)
                new = max(0, update - max(s.update, s.first_update))
                self.updates_run += new
                self.updates_left = max(0, self.updates_left - new)
                s.update = update
                fields = {"completed": update, "total": total}
                if reward is not None:
                    fields["reward"] = f"{reward:+.3f}"
                self._task(s, **fields)
        elif kind == "end":
            _, _, cell, status, seconds = event
            total = self._progress.tasks[s.task].total if self._progress is not None and s.task is not None else 0
            total = int(total or 0)
            self.updates_left = max(0, self.updates_left - max(0, total - max(s.update, s.first_update)))
            if status == "done":
                self.done += 1
                ran = max(0, s.update - s.first_update)
                if ran:
                    self.finished_seconds += seconds
                    self.finished_updates += ran
            elif status == STOPPED:
                self.stopped += 1
            else:
                self.failed += 1
            colour = {"done": "green", STOPPED: "yellow"}.get(status, "red")
            shown = "stopped" if status == STOPPED else status
            setting = self.settings.get(cell, "")
            live = self._progress is not None and s.task is not None
            run = self._progress.tasks[s.task].fields.get("run", "") if live else ""
            self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] [{colour}]{shown}[/] {cell} "
                               f"{setting + ' ' if setting else ''}{run} ({seconds:.1f} s)", highlight=False)
            s.cell, s.update, s.first_update = "", 0, 0
            if self._progress is not None and s.task is not None:
                self._progress.reset(s.task, total=1, completed=0)
            self._task(s, description="[dim]idle[/]", setting="", run="", seed="", reward="", clock=False, idle=True)
        self.refresh()

    def _task(self, s: _Slot, **fields: Any) -> None:
        if self._progress is None or s.task is None:
            return
        known = {k: fields.pop(k) for k in ("description", "total", "completed") if k in fields}
        self._progress.update(s.task, **known, **fields)

    def eta(self) -> float | None:
        """Seconds left: the remaining updates at the pace of finished cells (workers in parallel),
        else at the update rate so far; None before anything was measured; 0 when nothing is left."""
        if self.updates_left == 0:
            return 0.0
        if self.finished_updates:
            return self.updates_left * self.finished_seconds / self.finished_updates / self.jobs
        if self.measured_pace is not None:
            return self.updates_left * self.measured_pace / self.jobs
        elapsed = time.perf_counter() - self.t0
        if self.updates_run == 0 or elapsed <= 0:
            return None
        return self.updates_left / (self.updates_run / elapsed)

    def refresh(self) -> None:
        if self._progress is None:
            return
        eta = self.eta()
        failed = f", [red]{self.failed} failed[/]" if self.failed else ""
        stopped = f", [yellow]{self.stopped} stopped[/]" if self.stopped else ""
        self._progress.update(self._suite_task, completed=self.done + self.failed,
                              description=f"[bold]{self.title}[/] {self.done}/{self.total} done{failed}{stopped}",
                              eta="?" if eta is None else _clock(eta))

    def finish(self) -> None:
        if self._progress is not None:
            self.refresh()
            self._progress.stop()
            self._progress = None


@dataclass
class JobPhases:
    """One live view and one ETA over a job's phases, each run by its own ``run_suite`` call.

    ``phases``: (cells, updates) of each phase in order; ``display`` makes the next phase's display, which counts
    the phases after it as still to come and carries what the ones before it finished and measured."""

    title: str
    console: Console
    phases: list[tuple[int, int]]
    measured_pace: float | None = None
    index: int = 0
    earlier_done: int = 0
    finished_seconds: float = 0.0
    finished_updates: int = 0

    def display(self, settings: dict[str, str], phase: str) -> SuiteDisplay:
        later = self.phases[self.index + 1:]
        title = f"{self.title} [{phase}, phase {self.index + 1} of {len(self.phases)}]"
        return SuiteDisplay(title, self.console, settings=settings, finished_seconds=self.finished_seconds,
                            finished_updates=self.finished_updates, later_cells=sum(c for c, _ in later),
                            later_updates=sum(u for _, u in later), earlier_done=self.earlier_done,
                            measured_pace=self.measured_pace)

    def close(self, display: SuiteDisplay) -> None:
        """The phase ``display`` showed has ended: the next one starts from its counts and measured pace."""
        self.index += 1
        self.earlier_done = display.done
        self.finished_seconds, self.finished_updates = display.finished_seconds, display.finished_updates


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
