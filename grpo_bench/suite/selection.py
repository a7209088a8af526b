"""Choosing each method's point from its tuning cells (the rule of suite/tune.py), and ``chosen.json``.

Reads the tuning suite's results.parquet (update rows of the training-side metric only: the held-out eval
columns are never read here) and writes ``<tuning folder>/chosen.json``: per method its chosen point, the
score of every grid point (mean and spread over tuning seeds) and the rule, so the choice can be audited.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_bench.atomic import atomic_write_json
from grpo_bench.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from grpo_bench.suite.tune import SelectRule

CHOSEN = "chosen.json"


def cell_learning(frame: pd.DataFrame, rule: SelectRule, keys: list[str]) -> pd.DataFrame:
    """One row per finished tuning cell: method, seed, the tuned keys' values and ``learning`` (the rule's
    training-side gain: mean of the metric over the last ``window`` updates minus its value at update 0)."""
    import pandas as pd

    rows = frame[(frame["kind"] == "update") & (frame["metric"] == rule.metric)]
    out = []
    for cell, part in rows.groupby("cell", sort=False):
        part = part.sort_values("update")
        last = int(part["update"].max())
        start = part.loc[part["update"] == 0, "value"]
        tail = part.loc[part["update"] > last - rule.window, "value"]
        first = part.iloc[0]
        learning = float(tail.mean() - start.iloc[0]) if len(start) else math.nan
        out.append({"cell": cell, "method": first["method"], "seed": int(first["seed"]),
                    **{k: first[k] for k in keys}, "learning": learning, "updates": last + 1})
    return pd.DataFrame(out, columns=["cell", "method", "seed", *keys, "learning", "updates"])


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def choose(learning: pd.DataFrame, points: dict[str, list[dict[str, Any]]], seeds: list[int],
           rule: SelectRule) -> dict[str, Any]:
    """Per row (``learning["row"]``, else the method), the point with the highest mean learning over the tuning
    seeds (ties: the first point in grid order). Every (row, point, seed) cell must be finished: a choice from a
    partial grid is refused."""
    expected = sum(len(p) for p in points.values()) * len(seeds)
    if len(learning) < expected or learning["learning"].isna().any():
        raise UserError(f"tuning incomplete: {int(learning['learning'].notna().sum())} of {expected} tuning cells "
                        "finished; rerun `grpo-bench tune SUITE` (it resumes) before the table runs")
    out: dict[str, Any] = {"rule": rule.describe(), "metric": rule.metric, "window": rule.window,
                           "seeds": list(seeds), "methods": {}}
    for method, grid_points in points.items():
        scored = []
        for point in grid_points:
            mask = learning["row" if "row" in learning else "method"] == method
            for key, value in point.items():
                mask &= learning[key] == value
            values = learning.loc[mask, "learning"].astype(float)
            sd = float(values.std(ddof=1)) if len(values) > 1 else math.nan
            scored.append({"point": point, "mean": float(values.mean()), "sd": sd, "n": int(len(values)),
                           "per_seed": {str(int(s)): float(v) for s, v in zip(learning.loc[mask, "seed"], values)}})
        best = max(range(len(scored)), key=lambda j: (scored[j]["mean"], -j))
        out["methods"][method] = {"chosen": scored[best]["point"], "score": scored[best]["mean"], "grid": scored}
    return out


def grid_points(tuning_cells: list[Any], keys: list[str], rows: dict[str, str] | None = None
                ) -> dict[str, list[dict[str, Any]]]:
    """Per row (``rows``: cell id -> row; default the method), its distinct tuned points in grid order (from the
    tuning suite's cells)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cell in tuning_cells:
        method = rows[cell.id] if rows is not None else cell.labels["method"]
        point = {k: _plain(cell.labels[k]) for k in keys if k in cell.labels}
        if point not in out.setdefault(method, []):
            out[method].append(point)
    return out


def write_chosen(tuning_dir: Path, chosen: dict[str, Any]) -> Path:
    path = Path(tuning_dir) / CHOSEN
    atomic_write_json(path, chosen)
    return path


def read_chosen(tuning_dir: Path) -> dict[str, Any] | None:
    path = Path(tuning_dir) / CHOSEN
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); delete it and rerun `grpo-bench tune`") from None


def chosen_points(chosen: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """method -> its chosen values (what ``tune.with_chosen`` takes)."""
    return {m: dict(v["chosen"]) for m, v in chosen["methods"].items()}
