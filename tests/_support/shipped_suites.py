"""The shipped suite files as the tests read them: those that load now, and the pre-registered ones that wait for
the stored report their ``pick`` block reads (report/picks.py), each with its one-line refusal."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from grpo_bench.report.picks import SourceNotStored
from grpo_bench.report.suite_parts import load_suite_checked
from grpo_bench.suite.spec import Suite

ROOT = Path(__file__).resolve().parents[2]
@cache
def _read() -> tuple[dict[str, Suite], dict[str, str]]:
    loaded, waiting = {}, {}
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        try:
            loaded[path.stem] = load_suite_checked(path)
        except SourceNotStored as exc:  # any other error of a shipped suite is a bug, not a wait
            waiting[path.stem] = str(exc)
    return loaded, waiting


def shipped() -> dict[str, Suite]:
    """suite name -> the suite, for every shipped suite that loads now (picks resolved from reports/)."""
    return _read()[0]


def waiting() -> dict[str, str]:
    """suite name -> its refusal, for every pre-registered suite whose source report is not stored yet."""
    return _read()[1]
