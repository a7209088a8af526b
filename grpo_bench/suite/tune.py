"""Tuning parity (docs/statistics.md, "Tuning and seeds"): a suite's ``tune`` block, validated into a ``TuneSpec``,
the tuning suite it generates, and the final suite with each method at its chosen point.

A ``tune`` block::

    tune:
      family: {setting: A, reward: world_oracle}     # the one family every method is tuned on
      grid: {lr: [3.0e-5, 1.0e-4, 3.0e-4, 1.0e-3]}    # searched alike for every method
      methods: {cps: {noise_level: [0.5, 0.7]}}       # optional per-method grids (equal cell counts)
      seeds: [100, 101, 102]                          # tuning seeds (100..999), disjoint from the test seeds
      budget: {eval_samples: 1}                       # optional: refines the suite's budget for tuning cells
      select: {metric: reward, window: 10}            # fixed before the run; training-side metrics only

Every method gets the same tuning budget: the same number of grid points, the same seeds, the suite's own
per-cell budget. The selection rule reads the *training* side (the reward the policy is trained on, over its
last ``window`` updates, minus the same run's value at update 0), never the held-out eval. The test seeds of a
tuned suite start at ``TEST_SEEDS_FROM``; tuning seeds lie in ``TUNE_SEEDS``; 0..99 are for development.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from grpo_bench.errors import UserError, unknown
from grpo_bench.suite.spec import ReportSpec, SelectRule, Suite, TuneSpec
from grpo_bench.suite.values import config_values, grid_values, mapping

TUNE_KEYS = ("family", "grid", "methods", "seeds", "budget", "select")
SELECT_KEYS = ("metric", "window")
DEV_SEEDS = range(0, 100)
"""Development runs, pilots and the stored ablations (release 0.4 and before)."""
TUNE_SEEDS = range(100, 1000)
"""Tuning grids."""
TEST_SEEDS_FROM = 1000
"""The seeds a final (tuned) table runs on: no development or tuning run touches them."""
SELECTABLE = ("reward", "reward_vq", "reward_mq", "reward_ta")
"""Training-side metrics a selection rule may read (metrics.jsonl, the policy's own rollouts on training prompts)."""
TUNE_SUFFIX = "_tune"
__all__ = ["SelectRule", "TuneSpec", "cell_row", "parse_tune", "seed_major", "tuned_methods", "tuned_rows",
           "tuning_suite", "with_chosen"]


def _seeds(value: Any, where: str) -> list[int]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in value)):
        raise UserError(f"{where}tune.seeds must be a non-empty list of integers in "
                        f"{TUNE_SEEDS.start}..{TUNE_SEEDS.stop - 1}, got {value!r}")
    outside = [s for s in value if s not in TUNE_SEEDS]
    if outside:
        raise UserError(f"{where}tune.seeds {outside} lie outside the tuning range "
                        f"{TUNE_SEEDS.start}..{TUNE_SEEDS.stop - 1} (0..99: development, >= {TEST_SEEDS_FROM}: test)")
    if len(set(value)) != len(value):
        raise UserError(f"{where}tune.seeds lists a seed twice: {value!r}")
    return list(value)


def _select(data: Any, where: str) -> SelectRule:
    spec = mapping(data, where, "tune.select")
    for key in spec:
        if key not in SELECT_KEYS:
            raise unknown("tune.select key", key, SELECT_KEYS, where)
    metric = spec.get("metric", "reward")
    if isinstance(metric, str) and metric.startswith("eval_"):
        raise UserError(f"{where}tune.select.metric {metric!r} is a held-out eval metric; a selection rule reads "
                        f"the training side only; allowed: {', '.join(SELECTABLE)}")
    if metric not in SELECTABLE:
        raise unknown("tune.select.metric", metric, SELECTABLE, where)
    window = spec.get("window", 10)
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise UserError(f"{where}tune.select.window must be an integer >= 1, got {window!r}")
    return SelectRule(metric, window)


def tuned_methods(grid: dict[str, list[Any]], union: list[dict[str, list[Any]]], base: dict[str, Any]) -> list[str]:
    """The methods a suite compares, in first-seen order (its grids' ``method`` values, else its base method)."""
    out: list[str] = []
    for g in [grid, *union]:
        out += [m for m in g.get("method", []) if m not in out]
    return out or [base.get("method", "sage_grpo")]


def parse_tune(data: Any, where: str, *, seeds: list[int], grid: dict[str, list[Any]],
               union: list[dict[str, list[Any]]], base: dict[str, Any], updates: int,
               budget_keys: tuple[str, ...]) -> TuneSpec:
    """A suite's ``tune`` block, checked against the suite: equal budgets, training-side rule, disjoint seeds;
    ``budget_keys``: the keys a suite's budget may set (parse.py)."""
    spec = mapping(data, where, "tune")
    for key in spec:
        if key not in TUNE_KEYS:
            raise unknown("tune key", key, TUNE_KEYS, where)
    for key in ("grid", "seeds"):
        if key not in spec:
            raise UserError(f"{where}tune.{key} is missing (a tune block needs a grid and its own seeds)")
    family = config_values(spec.get("family", {}), where, "tune.family")
    shared = grid_values(spec["grid"], where, "tune.grid")
    methods = tuned_methods(grid, union, base)
    per_method: dict[str, dict[str, list[Any]]] = {}
    for name, g in mapping(spec.get("methods", {}), where, "tune.methods").items():
        if name not in methods:
            raise unknown("tune.methods method (one the suite compares)", name, methods, where)
        per_method[name] = grid_values(g, where, f"tune.methods.{name}")
    tuned = set(shared) | {k for g in per_method.values() for k in g}
    for key in sorted(tuned & {"method", "setting", "reward"}):
        raise UserError(f"{where}tune: {key!r} cannot be tuned (it is what the suite compares or its family)")
    for j, g in enumerate([grid, *union]):
        clash = sorted(tuned & (set(g) - {"method"}))
        if clash:
            path = "grid" if j == 0 else f"union[{j - 1}]"
            raise UserError(f"{where}tune and {path} both vary {', '.join(clash)}; a tuned key takes its chosen value")
    counts = {m: math.prod(len(v) for v in {**shared, **per_method.get(m, {})}.values()) for m in methods}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{m} {n}" for m, n in counts.items())
        raise UserError(f"{where}tune gives the methods unequal budgets ({shown} grid points); give every "
                        "method the same number of tuning cells")
    tune_seeds = _seeds(spec["seeds"], where)
    overlap = sorted(set(tune_seeds) & set(seeds))
    if overlap:
        raise UserError(f"{where}test seeds {overlap} are also tuning seeds; a tuned table runs on seeds the "
                        "tuning never touched")
    early = [s for s in seeds if s < TEST_SEEDS_FROM]
    if early:
        raise UserError(f"{where}seeds {early} lie below {TEST_SEEDS_FROM}: a tuned suite's test seeds start at "
                        f"{TEST_SEEDS_FROM} (0..99 development, {TUNE_SEEDS.start}..{TUNE_SEEDS.stop - 1} tuning)")
    budget = config_values(spec.get("budget", {}), where, "tune.budget", allowed=budget_keys)
    if "updates" in budget:
        raise UserError(f"{where}tune.budget.updates: tuning cells run the suite's own {updates} updates "
                        "(a point tuned on another budget is not the point the table runs)")
    rule = _select(spec.get("select", {}), where)
    if rule.window > updates:
        raise UserError(f"{where}tune.select.window {rule.window} exceeds the suite's {updates} updates")
    return TuneSpec(family, shared, per_method, tune_seeds, budget, rule)


ROW_FREE = ("method", "setting", "reward")
"""Keys that never make a row of their own: the method names it; setting and reward are the families a row is
compared in (it is tuned on ``tune.family``)."""


def tuned_rows(suite: Suite) -> list[tuple[str, str, dict[str, Any]]]:
    """(row, method, reading) for every row the suite compares, in first-seen order: a method under each
    combination of the other keys its grids vary (a reading: ``kl: null`` as shipped, a KL variant, the
    equalizer off ...). Each row is tuned alike and takes its own choice; the first reading of a method is named
    by the method alone (so a suite of one reading per method keeps its rows and its stored choices)."""
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for g in suite.grids():
        keys = [k for k in g if k not in ROW_FREE]
        for m in g.get("method", [suite.base.get("method", "sage_grpo")]):
            for combo in itertools.product(*(g[k] for k in keys)):
                reading = dict(zip(keys, combo))
                if any(rm == m and rr == reading for _, rm, rr in rows):
                    continue
                first = not any(rm == m for _, rm, _ in rows)
                rows.append((m if first else row_name(m, reading), m, reading))
    return rows


def row_name(method: str, reading: dict[str, Any]) -> str:
    from grpo_bench.suite.expand import show_value

    return f"{method} [{' '.join(f'{k}={show_value(v)}' for k, v in reading.items())}]"


def cell_row(rows: list[tuple[str, str, dict[str, Any]]], labels: dict[str, Any], tuned: set[str]) -> str:
    """The row a cell belongs to: its method and exactly the reading its labels carry."""
    reading = {k: v for k, v in labels.items() if k not in (*ROW_FREE, "seed", *tuned)}
    for name, m, r in rows:
        if m == labels["method"] and r == reading:
            return name
    raise UserError(f"cell {labels} belongs to no row of the suite")


def tuning_suite(suite: Suite) -> Suite:
    """The generated suite of tuning cells: every row (a method under one reading) × its grid points × the tuning
    seeds, on the family.

    Cells come seed-major (see ``seed_major``) so that a partial run holds whole tuning curves."""
    tune = suite.tune
    assert tune is not None
    union = [{"method": [m], **{k: [v] for k, v in reading.items()}, **tune.grid, **tune.methods.get(m, {})}
             for _, m, reading in tuned_rows(suite)]
    report = ReportSpec(tables=["tuning"], figures=["tuning_curves", "reward_curves"], baseline={},
                        strata=["method"], held_out=False)
    return dataclasses.replace(
        suite, name=suite.name + TUNE_SUFFIX, path=f"{suite.path} (tune)", base={**suite.base, **tune.family},
        grid={}, union=union, seeds=list(tune.seeds), budget={**suite.budget, **tune.budget}, report=report,
        description=f"Tuning grid of {suite.name}: {tune.select.describe()}.", text="", decide=None, tune=None)


def seed_major(cells: list[Any]) -> list[Any]:
    """Cells by seed first, then grid point, then method: every method's whole grid on the first seed before the
    next seed, the methods interleaved, so a partial run holds the same points for every method."""
    rank: dict[tuple[str, int], int] = {}
    keyed = []
    for order, cell in enumerate(cells):
        key = (cell.labels["method"], cell.labels["seed"])
        keyed.append(((cell.labels["seed"], rank.get(key, 0), order), cell))
        rank[key] = rank.get(key, 0) + 1
    return [cell for _, cell in sorted(keyed, key=lambda kc: kc[0])]


def with_chosen(suite: Suite, chosen: dict[str, dict[str, Any]]) -> Suite:
    """The suite with each row at its chosen point: every grid split per row (method × reading), the row's tuned
    values added as one-value grid keys (so they show in its row label)."""
    rows = tuned_rows(suite)
    missing = [name for name, _, _ in rows if name not in chosen]
    if missing:
        raise UserError(f"{suite.path}: no chosen point for {', '.join(missing)}; run `grpo-bench tune {suite.path}`")
    grids: list[dict[str, list[Any]]] = []
    for g in suite.grids():
        keys = [k for k in g if k not in ROW_FREE]
        for m in g.get("method", [suite.base.get("method", "sage_grpo")]):
            for combo in itertools.product(*(g[k] for k in keys)):
                reading = dict(zip(keys, combo))
                name = next(n for n, rm, rr in rows if rm == m and rr == reading)
                grids.append({**g, "method": [m], **{k: [v] for k, v in reading.items()},
                              **{k: [v] for k, v in chosen[name].items()}})
    return dataclasses.replace(suite, grid={}, union=grids)
