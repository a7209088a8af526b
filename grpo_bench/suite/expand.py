"""A suite's cells: the grid and union combinations times the seeds, each a resolved run config.

A cell's config is RunConfig defaults <- base <- budget <- command-line overrides <- its grid
values <- its seed, then ``resolve``d (method defaults filled in). Its id is ``cell_id`` of that
resolved config (config/identity.py): its science fields and the digests of the shipped world weights it
loads, so it does not depend on key order, on which file declared a value, on the host, its device,
thread count or precision, and it changes when the world model or judge is rebuilt.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import from_dict, resolve
from grpo_bench.errors import UserError
from grpo_bench.suite.spec import LABEL_FIRST, Cell, Suite

MAX_CELLS = 10_000
"""Cells of one suite (a grid that expands further is a typo, not a plan)."""


def show_value(value: Any) -> str:
    """A config value as a row label and folder names write it (booleans as on/off, lists comma-joined)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def group_label(method: str, shown: dict[str, Any]) -> str:
    """A row's label: the method, then each shown key's value (``key=value``, as ``show_value`` writes it)."""
    return " ".join([method] + [f"{k}={show_value(v)}" for k, v in shown.items() if k != "method"])


def expand(suite: Suite) -> list[Cell]:
    """Every cell of the suite, in grid order then seed order; duplicate runs are an error."""
    fixed = {**suite.base, **suite.budget, **suite.overrides}
    keys = suite.label_keys()
    cells: list[Cell] = []
    seen: dict[str, dict[str, Any]] = {}
    n = sum(math.prod(len(v) for v in g.values()) for g in suite.grids()) or 1
    if n * len(suite.seeds) > MAX_CELLS:
        raise UserError(f"{suite.path}: {n * len(suite.seeds)} cells (grid x seeds); at most {MAX_CELLS}")
    combos = [dict(zip(g, values)) for g in suite.grids() for values in itertools.product(*g.values())] or [{}]
    for combo in combos:
        for seed in suite.seeds:
            labels = {**combo, "seed": seed}
            shown = ", ".join(f"{k}={show_value(v)}" for k, v in labels.items())
            cfg = resolve(from_dict({**fixed, **labels}, where=f"{suite.path}: cell ({shown}): "))
            cid = cell_id(cfg)
            if cid in seen:
                first = ", ".join(f"{k}={show_value(v)}" for k, v in seen[cid].items())
                raise UserError(f"{suite.path}: cells ({first}) and ({shown}) are the same run (identical "
                                f"resolved configs, id {cid}); remove one of them from grid/union")
            seen[cid] = labels
            # A row shows method, kl and the keys its own grid sets (a union entry's keys only on its cells).
            shown_keys = [k for k in keys if k in LABEL_FIRST or k in combo]
            cells.append(Cell(cid, labels, group_label(cfg.method, {k: cfg.get(k) for k in shown_keys}), cfg))
    return cells
