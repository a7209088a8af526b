"""Registries of report parts. A part renders files under the report folder and returns the
sections report.md embeds; suites name the parts they want (report.tables, report.figures)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_bench.registry import Registry


@dataclass
class Section:
    """One block of report.md."""

    title: str
    how: str
    """One line: how to read it."""
    body: str
    """Markdown: a table, or an image link relative to report.md."""


@dataclass
class Context:
    """What every part receives."""

    df: pd.DataFrame
    """results.parquet."""
    out: Path
    """The report folder (report.md lives here)."""
    spec: dict[str, Any] = field(default_factory=dict)
    """The suite's report spec (ReportSpec.to_dict())."""


Part = Callable[[Context], list[Section]]


class _Parts(Registry[Part]):
    def _load(self) -> None:
        from grpo_bench.report import figures, hacking, power_table, tables  # noqa: F401  (modules register parts)


TABLES: Registry[Part] = _Parts("report table")
FIGURES: Registry[Part] = _Parts("report figure")
