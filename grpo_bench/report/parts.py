"""The report-part registries and types (defined in grpo_bench.suite.report_parts, where the suite
spec validates part names; re-exported here for the parts that register)."""

from grpo_bench.suite.report_parts import FIGURES, TABLES, Context, Part, Section

__all__ = ["FIGURES", "TABLES", "Context", "Part", "Section"]
