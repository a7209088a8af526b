"""Registries of report parts. A part renders files under the report folder and returns the
sections report.md embeds; suites name the parts they want (report.tables, report.figures).

The parts themselves (grpo_bench.report.tables, grpo_bench.report.figures ...) register into these
registries and are imported on first lookup, so a part may import this module without a cycle. The names a
suite asks for are checked against them where a command loads the suite (grpo_bench.report.suite_parts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_bench.registry import LazyRegistry


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

_PART_MODULES = (
    "grpo_bench.report.agreement", "grpo_bench.report.equal_compute", "grpo_bench.report.factors",
    "grpo_bench.report.figures",
    "grpo_bench.report.hacking",
    "grpo_bench.report.liveness", "grpo_bench.report.ranks",
    "grpo_bench.report.power_table",
    "grpo_bench.report.tables", "grpo_bench.report.transfer", "grpo_bench.report.tuning",
)

TABLES: LazyRegistry[Part] = LazyRegistry("report table", modules=_PART_MODULES)
FIGURES: LazyRegistry[Part] = LazyRegistry("report figure", modules=_PART_MODULES)
