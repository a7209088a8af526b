"""The report parts a suite names, checked where a suite is loaded for a command, before anything runs.

A suite's ``report`` block names tables and figures (``report.tables``, ``report.figures``) and may give
``min_effect`` per Table 2 headline column. The suite layer checks the block's shape (suite/report_section.py);
the names are the report's own (its registries load plug-ins before a lookup, so a plug-in may add a part), so
they are checked here, in the layer that owns them, and the suite layer imports nothing from the report.
Every command that loads a suite loads it through ``load_suite_checked``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_bench.errors import unknown
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.spec import ReportSpec, Suite


def check_report_parts(report: ReportSpec, where: str) -> None:
    """Every table and figure ``report`` names is registered, and every ``min_effect`` column is one of Table 2's
    headline columns (or ``default``); else one line naming the file, the key and the allowed values."""
    from grpo_bench.report.parts import FIGURES, TABLES
    from grpo_bench.report.tables import TABLE2

    for key, registry in (("tables", TABLES), ("figures", FIGURES)):
        for i, name in enumerate(getattr(report, key)):
            registry.get(name, where=f"{where}report.{key}[{i}]: ")
    if isinstance(report.min_effect, dict):
        allowed = [*(title for title, _, _ in TABLE2), "default"]  # Table 2's headline columns
        for column in report.min_effect:
            if column not in allowed:
                raise unknown("report.min_effect column", column, allowed, where)


def load_suite_checked(path: str | Path, overrides: dict[str, Any] | None = None) -> Suite:
    """``suite.parse.load_suite`` (a ``pick`` block resolved from the stored reports, report/picks.py), then its
    report parts checked (``check_report_parts``)."""
    from grpo_bench.report.picks import resolve_picks

    suite = load_suite(path, overrides, resolve_picks)
    check_report_parts(suite.report, f"{suite.path}: ")
    return suite
