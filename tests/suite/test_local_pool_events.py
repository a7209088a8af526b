"""The local pool hands the display every event a worker emitted, the last ones included: a worker's events travel
through a queue whose feeder thread may lag the cell's result (a loaded machine), and a display that missed a cell's
``end`` counted the tuning grid one cell short (tests/suite/test_job_phases.py failed so once, 23 of 24)."""

from __future__ import annotations

from suite_support import SMALL_SUITE, write_suite

from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.runner import run_suite


class Recorder:
    """A display that keeps every event."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def begin(self, **_) -> None: ...

    def event(self, event: tuple) -> None:
        self.events.append(event)

    def refresh(self) -> None: ...

    def finish(self) -> None: ...


def test_every_cells_end_event_reaches_the_display_when_the_event_pipe_lags(tmp_path):
    suite = load_suite(write_suite(tmp_path / "s.yaml", {**SMALL_SUITE, "union": [],
                                                          "report": {"tables": [], "figures": []}}))
    cells = expand(suite)
    display = Recorder()
    summary = run_suite(suite, cells, tmp_path / "runs", jobs=2, trainer="suite_support:lagging_events_train",
                        display=display)
    assert summary.count("done") == len(cells) == 4
    ends = sorted(e[2] for e in display.events if e[0] == "end")
    assert ends == sorted(c.id for c in cells)
    updates = [e for e in display.events if e[0] == "update"]
    assert len(updates) == 4 * suite.base["updates"]  # every progress event too, none dropped or doubled
