"""Rows a suite picks from stored results by a rule declared before it runs: a suite's ``pick`` block.

A pre-registered comparison names its rows by rule, not by value, so the choice cannot bend to what the rows
later show and the suite can be committed before the results it reads exist::

    pick:
      - name: candidate
        from: factors               # the stored report reports/<from>/results.parquet (a folder name, not a path)
        rule: best_predicted        # the factor model's best point of the full factorial (report/factors.py)
        seeds: [1000, 1001, 1002]   # the source seeds the rule reads: fixed, so the pick never moves
      - name: comparator
        from: field
        rule: best_row              # the row with the highest mean held-out learning
        seeds: [1000, 1001, 1002, 1003, 1004, 1005]
        where: {reward: world_oracle, max_train_steps: 3}   # among the rows whose config has these values
        take: [method]              # the config values the pick copies (the suite's base gives the rest)
        baseline: true              # the report's paired baseline

``reports/`` is the folder beside the suite file's folder (suites/x.yaml -> reports/). Each pick becomes one
``union`` row; the suite's ``tune`` block then tunes every row alike. Refused in one line before any cell: a source
that is missing or unreadable, a seed the source does not hold, a suite seed the source already used (a pick is
tested on fresh seeds, the ones ``run --until-decided`` adds included), a stored design that does not parse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_bench.errors import UserError, unknown
from grpo_bench.preflight import folder_name
from grpo_bench.registry import Registry
from grpo_bench.report import data
from grpo_bench.report.factors import RESPONSE, design_frame, predict_points
from grpo_bench.suite.design import in_point_order, parse_design
from grpo_bench.suite.results import load_results
from grpo_bench.suite.values import config_values, mapping

PICK_KEYS = ("name", "from", "rule", "seeds", "where", "take", "baseline")


class SourceNotStored(UserError):
    """A pick's source report, or the look its seeds name, is not stored yet: the suite waits for it (a command
    listing suites shows it as waiting; running it is refused in this one line)."""


Rule = Callable[[pd.DataFrame, dict[str, Any], str], dict[str, Any]]
RULES: Registry[Rule] = Registry("pick rule")


@RULES.register("best_predicted")
def best_predicted(df: pd.DataFrame, spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The factor model's best point of the full factorial, as config values (the stored design's levels)."""
    stored = data.suite_info(df).get("report", {}).get("design")
    if not stored:
        raise UserError(f"{where}the source holds no factorial design (rule best_predicted reads a design suite)")
    # read back from disk: checked again, its factors first put back in the order its points list them
    design = parse_design(in_point_order(stored), f"{where}stored design: ", set(), None)
    frame = design_frame(df, design.to_dict())
    if frame.empty:
        raise UserError(f"{where}the source holds no finished design cell on the pick's seeds")
    factors = {f: list(levels) for f, levels in design.factors.items()}
    best = predict_points(frame, factors, design.estimates, "y").iloc[0]
    values: dict[str, Any] = {"method": design.method}
    for factor in factors:
        values.update(design.factors[factor][str(best[factor])])
    return values


@RULES.register("best_row")
def best_row(df: pd.DataFrame, spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The config values ``take`` names of the row (a cell's grid labels but the seed) with the highest mean
    held-out learning among the rows whose resolved config matches ``where``."""
    learned = data.learning(df)
    if learned.empty or RESPONSE not in learned:
        raise UserError(f"{where}the source holds no finished cell with a held-out evaluation on the pick's seeds")
    cells = data.cell_infos(df)  # cell -> its stored record: labels (the grid values) and resolved config
    rows: dict[str, list[float]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for r in learned.itertuples():
        record = cells.get(r.cell, {})
        config, labels = record.get("config", {}), record.get("labels", {})
        if config and all(config.get(k) == v for k, v in spec["where"].items()):
            key = json.dumps({k: v for k, v in labels.items() if k != "seed"}, sort_keys=True, default=str)
            rows.setdefault(key, []).append(getattr(r, RESPONSE))
            configs[key] = config
    if not rows:
        raise UserError(f"{where}no row of the source has {spec['where']}")
    best = configs[max(rows, key=lambda k: sum(rows[k]) / len(rows[k]))]
    missing = [k for k in spec["take"] if k not in best]
    if missing:
        raise unknown("pick.take key (a run config key)", missing[0], best, where)
    return {k: best[k] for k in spec["take"]}


def _pick_spec(item: Any, i: int, where: str) -> dict[str, Any]:
    path = f"pick[{i}]"
    spec = mapping(item, where, path)
    for key in spec:
        if key not in PICK_KEYS:
            raise unknown(f"{path} key", key, PICK_KEYS, where)
    for key in ("name", "from", "rule", "seeds"):
        if key not in spec:
            raise UserError(f"{where}{path}.{key} is missing (a pick names itself, its source report, its rule "
                            "and the source seeds it reads)")
    folder_name(str(spec["from"]), f"{where}{path}.from: ")
    RULES.get(spec["rule"], where=f"{where}{path}.rule: ")
    seeds = spec["seeds"]
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise UserError(f"{where}{path}.seeds must be a non-empty list of integers, got {seeds!r}")
    take = spec.get("take", [])
    if not isinstance(take, list) or not all(isinstance(k, str) for k in take):
        raise UserError(f"{where}{path}.take must be a list of label names, got {take!r}")
    if spec["rule"] == "best_row" and not take:
        raise UserError(f"{where}{path}.take must name the labels rule best_row copies (e.g. [method])")
    baseline = spec.get("baseline", False)
    if not isinstance(baseline, bool):
        raise UserError(f"{where}{path}.baseline must be true or false, got {baseline!r}")
    return {**spec, "where": config_values(spec.get("where", {}), where, f"{path}.where"), "take": take,
            "baseline": baseline, "path": path}


def _source(reports: Path, spec: dict[str, Any], where: str) -> pd.DataFrame:
    file = reports / spec["from"] / "results.parquet"
    if not file.is_file():
        raise SourceNotStored(f"{where}{spec['path']}.from: no stored results at {file} (run and store "
                        f"suite {spec['from']!r} first; a pick reads its stored report)")
    df = load_results(file)
    held = _seeds(df)
    lacking = [s for s in spec["seeds"] if s not in held]
    if lacking:
        raise SourceNotStored(f"{where}{spec['path']}.seeds: {file} holds no cells on seeds {lacking} (it holds "
                        f"{held}); store the source's later looks first")
    return df


def _seeds(df: pd.DataFrame) -> list[int]:
    """The seeds the source's cells ran (its suite row carries seed 0, the fixed columns of no cell)."""
    return sorted({int(s) for s in df.loc[df["kind"] != "suite", "seed"].dropna().unique()})


def resolve_picks(value: Any, where: str, suite_path: str, planned_seeds: list[int]
                  ) -> tuple[list[dict[str, list[Any]]], dict[str, Any]]:
    """(one union grid per pick, the baseline's config values or {}) from a suite's ``pick`` block; every seed
    the suite may run (``planned_seeds``) must be fresh to each source."""
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}pick must be a non-empty list of picks (name, from, rule, seeds, ...)")
    reports = Path(suite_path).resolve().parent.parent / "reports"
    grids, baseline, names = [], {}, set()
    for i, item in enumerate(value):
        spec = _pick_spec(item, i, where)
        if spec["name"] in names:
            raise UserError(f"{where}{spec['path']}.name: {spec['name']!r} names two picks")
        names.add(spec["name"])
        df = _source(reports, spec, where)
        reused = sorted(set(planned_seeds) & set(_seeds(df)))
        if reused:
            raise UserError(f"{where}seeds {reused} were run by the pick's source {spec['from']!r}; a picked row is "
                            "tested on fresh seeds (those --until-decided adds included)")
        # the pick's seeds only; the suite row stays (a rule reads the stored design there)
        df = df[df["kind"].eq("suite") | df["seed"].isna() | df["seed"].isin(spec["seeds"])]
        values = RULES.get(spec["rule"])(df, spec, f"{where}{spec['path']} ({spec['rule']} of {spec['from']}): ")
        values = config_values(values, where, f"{spec['path']} (picked)")
        grids.append({k: [v] for k, v in values.items()})
        if spec["baseline"]:
            if baseline:
                raise UserError(f"{where}{spec['path']}.baseline: two picks are the baseline; mark one")
            baseline = values
    return grids, baseline
