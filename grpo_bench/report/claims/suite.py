"""The view of one stored suite that the checks read (``<suite>/results.parquet``: its cells, their configs
and per-seed learning), and how a selection of rows by config values reads in the ledger."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.power import min_effect_of, min_effects

Where = dict[str, Any]
"""Config values that select rows: {"method": "sage_grpo", "kl": "dual"}; {} selects every row."""


class Suite:
    """One stored report folder, read once: its results table and views of it."""

    def __init__(self, root: Path, name: str):
        from grpo_bench.report import sources

        self.name, self.path = name, root / name
        self.df = data.with_grid_columns(sources.load_frame(self.path))
        self.info = data.suite_info(self.df)
        self.configs = {c: i.get("config", {}) for c, i in data._cell_infos(self.df).items()}
        rows = self.df[self.df["kind"] == "cell"].drop_duplicates("cell")
        self._groups = dict(zip(rows["cell"], rows["group"].astype(str)))
        self._learning: pd.DataFrame | None = None

    @property
    def learning(self) -> pd.DataFrame:
        if self._learning is None:
            self._learning = data.learning(self.df)
        return self._learning

    def min_effect(self, title: str) -> float:
        return min_effect_of(min_effects((self.info.get("report") or {}).get("min_effect")), title)

    def families(self, within: Where, split: Sequence[str]) -> dict[str, list[str]]:
        """Cells matching ``within``, grouped by their values of the ``split`` keys ('reward=world_judge')."""
        out: dict[str, list[str]] = {}
        for cell, cfg in self.configs.items():
            if matches(cfg, within):
                label = ", ".join(f"{k}={value_text(cfg.get(k))}" for k in split)
                out.setdefault(label, []).append(cell)
        return dict(sorted(out.items()))

    def groups(self, cells: Sequence[str], where: Where) -> list[str]:
        """Row labels (groups) of the given cells whose config matches ``where``, in suite order."""
        chosen = {self.group_of(c) for c in cells if matches(self.configs[c], where)}
        return [g for g in data.group_order(self.df) if g in chosen]

    def group_of(self, cell: str) -> str:
        return self._groups[cell]

    def per_seed(self, cells: Sequence[str], group: str, column: str) -> pd.Series:
        """Learning of ``column`` per seed for one group among the given cells."""
        part = self.learning[self.learning["cell"].isin(cells) & (self.learning["group"] == group)]
        if part.empty or column not in part:
            return pd.Series(dtype=float)
        return part.set_index("seed")[column].astype(float).dropna()


def matches(cfg: dict, where: Where) -> bool:
    return all(cfg.get(k) == v for k, v in where.items())


def value_text(value: Any) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def where_text(where: Where) -> str:
    return " ".join(f"{k}={value_text(v)}" for k, v in where.items()) or "every row"


def short_label(group: str, keys: Sequence[str]) -> str:
    """A row label without the family's own keys (they are in the family label)."""
    for key in keys:
        group = data.without_key(group, key)
    return group
