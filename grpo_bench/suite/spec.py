"""The suite's data: a validated suite (``Suite``) with its report and decide blocks, and its cells (``Cell``).

parse.py builds a ``Suite`` from a suite file (the file format is described there); expand.py turns it
into ``Cell``s; ablation.py derives generated suites from one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import yaml

from grpo_bench.config.run import RunConfig

LABEL_FIRST = ("method", "kl")
"""Keys always shown in a cell's row label, in this order (their resolved values)."""


@dataclass
class ReportSpec:
    """What ``grpo-bench report`` renders for a suite."""

    tables: list[str] = field(default_factory=lambda: ["table2", "winrates"])
    """Registered tables (grpo_bench.report.parts.TABLES)."""
    figures: list[str] = field(default_factory=lambda: ["reward_curves", "kl_curves", "drift", "strips"])
    """Registered figures (grpo_bench.report.parts.FIGURES)."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """Config values selecting the baseline row of each setting for paired differences."""
    smooth: int = 5
    """Rolling window (updates) of the training-reward curves."""
    min_effect: float | dict[str, float] | None = None
    """Smallest difference of interest for the power table: a number, or {column title: number,
    'default': number}; None keeps the defaults (oracle 0.05, judge 0.25)."""
    held_out: bool = True
    """Whether the report shows held-out eval numbers at all (off for a tuning grid: its selection never reads
    them, and neither does its reader)."""
    design: dict[str, Any] = field(default_factory=dict)
    """The suite's factorial design (suite/design.py ``Design.to_dict``), for the factor-effects part; empty: none."""
    strata: list[str] = field(default_factory=lambda: ["setting"])
    """Config keys that split the report into separate families (each with its own baseline row,
    bold, Holm family and power rows), e.g. [setting, reward] for a table with two reward tracks."""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if not out["design"]:  # a suite without a factorial stores no design key (its parser takes none)
            out.pop("design")
        return out


@dataclass(frozen=True)
class DecideSpec:
    """How ``grpo-bench run --until-decided`` adds seeds (docs/statistics.md, "Adding seeds in blocks")."""

    max_seeds: int = 12
    """Stop at this many seeds at the latest (the information fraction of a look is seeds / max_seeds)."""
    block: int = 3
    """Seeds added per look."""
    alpha: float = 0.05
    """Overall two-sided level, spent with O'Brien-Fleming over the planned looks."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SelectRule:
    """A tuning grid's selection rule (suite/tune.py). Per method: the grid point with the highest mean over
    tuning seeds of (mean ``metric`` over the last
    ``window`` updates) − (``metric`` at update 0); ties go to the first point in grid order."""

    metric: str = "reward"
    window: int = 10

    def describe(self) -> str:
        return (f"max over the grid of the tuning-seed mean of (mean training {self.metric} over the last "
                f"{self.window} updates − the same run's {self.metric} at update 0)")


@dataclass(frozen=True)
class TuneSpec:
    family: dict[str, Any]
    grid: dict[str, list[Any]]
    methods: dict[str, dict[str, list[Any]]]
    seeds: list[int]
    budget: dict[str, Any] = field(default_factory=dict)
    select: SelectRule = SelectRule()

    def keys(self) -> list[str]:
        """Every tuned key, shared grid first."""
        out = list(self.grid)
        for g in self.methods.values():
            out += [k for k in g if k not in out]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "grid": self.grid, "methods": self.methods, "seeds": self.seeds,
                "budget": self.budget, "select": dataclasses.asdict(self.select)}


@dataclass
class Suite:
    """A validated suite."""

    name: str
    path: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    union: list[dict[str, list[Any]]]
    seeds: list[int]
    budget: dict[str, Any]
    resources: dict[str, int]
    report: ReportSpec
    description: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    """The suite file as read (stored next to the results); empty for a generated suite."""
    decide: DecideSpec | None = None
    """The ``decide`` block (None: the suite has none; ``run --until-decided`` then refuses)."""
    tune: TuneSpec | None = None
    """The ``tune`` block (suite/tune.py): each method runs at its own point chosen on tuning seeds."""
    design: Any = None
    """The ``design`` block (suite/design.py ``Design``): a factorial whose points are part of ``union``."""

    def to_yaml(self) -> str:
        """The suite as a file (what ``run`` stores next to the results of a generated suite)."""
        data = {"name": self.name, "description": self.description, "base": {**self.base, **self.overrides},
                "grid": self.grid, "union": self.union, "seeds": self.seeds,
                "budget": {**self.budget, **self.resources}, "report": self.report.to_dict(),
                "decide": self.decide.to_dict() if self.decide else {},
                "tune": self.tune.to_dict() if self.tune else {}}
        return yaml.safe_dump({k: v for k, v in data.items() if v not in ({}, [], "")}, sort_keys=False)

    def grids(self) -> list[dict[str, list[Any]]]:
        return ([self.grid] if self.grid else []) + self.union

    def label_keys(self) -> list[str]:
        """Grid keys of all grids, in declared order, without seed/setting; method and kl first."""
        keys = list(LABEL_FIRST)
        for g in self.grids():
            keys += [k for k in g if k not in keys and k != "setting"]
        return keys


@dataclass(frozen=True)
class Cell:
    """One run of a suite."""

    id: str
    labels: dict[str, Any]
    """The grid values and the seed that made this cell (user-facing names)."""
    group: str
    """Row label without seed and setting, from resolved values ("sage_grpo kl=dual")."""
    config: RunConfig
    """The resolved config the trainer receives."""

    def meta(self, suite: str) -> dict[str, Any]:
        return {"id": self.id, "suite": suite, "labels": self.labels, "group": self.group,
                "config": self.config.to_dict()}
