"""The ``report`` block of a suite file, validated into a ``ReportSpec``: its keys and the shape of each value.

Which table and figure names exist, and Table 2's headline columns that ``min_effect`` may name, belong to the
report layer (its registries load plug-ins before a lookup, so a plug-in may add a part): the report checks them
where a suite is loaded for a command (grpo_bench/report/suite_parts.py ``load_suite_checked``), still before
anything runs. This module imports nothing from the report layer (pyproject [tool.importlinter]).
"""

from __future__ import annotations

import math
from typing import Any

from grpo_bench.config.run import FIELDS
from grpo_bench.errors import UserError, unknown
from grpo_bench.preflight import shown
from grpo_bench.suite.spec import ReportSpec
from grpo_bench.suite.values import config_values, mapping

REPORT_KEYS = ("tables", "figures", "baseline", "smooth", "min_effect", "strata", "held_out")


def parse_report(data: Any, where: str) -> ReportSpec:
    """A suite's ``report`` mapping; ``where`` is the error prefix (``"suites/x.yaml: "``). Part names are
    checked by the report layer (report/suite_parts.py)."""
    spec = mapping(data, where, "report")
    for key in spec:
        if key not in REPORT_KEYS:
            raise unknown("report key", key, REPORT_KEYS, where)
    out = ReportSpec()
    for key in ("tables", "figures"):
        if key in spec:
            names = spec[key]
            if not isinstance(names, list):
                raise UserError(f"{where}report.{key} must be a list of {key[:-1]} names, got {shown(names, 60)}")
            setattr(out, key, [str(n) for n in names])
    if "baseline" in spec:
        out.baseline = config_values(spec["baseline"], where, "report.baseline")
    if "smooth" in spec:
        if not isinstance(spec["smooth"], int) or isinstance(spec["smooth"], bool) or spec["smooth"] < 1:
            raise UserError(f"{where}report.smooth must be an integer >= 1, got {spec['smooth']!r}")
        out.smooth = spec["smooth"]
    if "held_out" in spec:
        if not isinstance(spec["held_out"], bool):
            raise UserError(f"{where}report.held_out must be true or false, got {spec['held_out']!r}")
        out.held_out = spec["held_out"]
    if spec.get("min_effect") is not None:  # None: a stored spec without one
        out.min_effect = _min_effect(spec["min_effect"], where)
    if "strata" in spec:
        keys = spec["strata"]
        if not isinstance(keys, list) or not keys:
            raise UserError(f"{where}report.strata must be a non-empty list of config keys, e.g. [setting, reward]")
        for i, key in enumerate(keys):
            if key not in FIELDS:
                raise unknown(f"report.strata[{i}] config key", key, FIELDS, where)
        out.strata = [str(k) for k in keys]
    return out


def _min_effect(value: Any, where: str) -> float | dict[str, float]:
    """A number > 0, or {column title: number > 0}; which titles exist is the report's (report/suite_parts.py)."""

    def positive(v: Any, key: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise UserError(f"{where}{key} must be a finite number > 0, got {v!r}")
        return float(v)

    if not isinstance(value, dict):
        return positive(value, "report.min_effect")
    return {str(k): positive(v, f"report.min_effect.{k}") for k, v in value.items()}
