"""A suite's factorial ``design`` block: factors with levels, the design points, and the effects it claims to
estimate, checked at load before any cell runs (docs/factors.md).

A ``design`` block::

    design:
      method: flow_grpo                 # the policy-gradient method every point runs (its loss family)
      factors:                          # factor -> level -> the config values that make it
        step_rule: {all: {step_rule: all}, window: {step_rule: window, steps.size: 3}}
        kernel: {flow: {kernel: flow, noise_level: 0.7}, cps: {kernel: cps, noise_level: 0.7}}
      points: full                      # or a list of [level, level, ...] in factor order (a fraction)
      estimates: [step_rule, kernel, step_rule:kernel]   # effects the report claims
      not_estimated: []                 # effects the design cannot separate (checked: really aliased)

Each point becomes one ``union`` grid (one configuration, its own tuned row). An effect is a factor name or two
joined by ``:``; the model over the points is the intercept plus every claimed effect in effect (sum-to-zero)
coding: it must have full column rank, else the first claimed effect that breaks it is refused in one line. Every
two-factor interaction is named once, in ``estimates`` or in ``not_estimated``, and a ``not_estimated`` effect must
indeed be aliased (adding it to the model loses rank): the suite says which effects it cannot estimate, and the
check keeps it honest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from grpo_bench.config.run import FIELDS, coerce
from grpo_bench.errors import UserError, unknown
from grpo_bench.params import is_param_key
from grpo_bench.suite.values import check_name, mapping

DESIGN_KEYS = ("method", "factors", "points", "estimates", "not_estimated")


@dataclass(frozen=True)
class Design:
    method: str
    factors: dict[str, dict[str, dict[str, Any]]]
    """factor -> level -> config values (the level's mapping)."""
    points: list[tuple[str, ...]]
    """Design points: one level per factor, in factor order."""
    estimates: list[str]
    not_estimated: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "factors": self.factors, "points": [list(p) for p in self.points],
                "estimates": self.estimates, "not_estimated": self.not_estimated}

    def union(self) -> list[dict[str, list[Any]]]:
        """One grid per point: the method and every factor level's config values as one-value lists."""
        out = []
        for point in self.points:
            grid: dict[str, list[Any]] = {"method": [self.method]}
            for factor, level in zip(self.factors, point):
                grid.update({k: [v] for k, v in self.factors[factor][level].items()})
            out.append(grid)
        return out


def effect_columns(levels: list[str], values: list[str]) -> np.ndarray:
    """Effect (sum-to-zero) coding of one factor: [n, L-1], level j < L-1 -> e_j, the last level -> -1s."""
    n, width = len(values), len(levels) - 1
    out = np.zeros((n, width))
    for i, v in enumerate(values):
        j = levels.index(v)
        out[i] = -1.0 if j == width else np.eye(width)[j] if width else out[i]
    return out


def model_matrix(factors: dict[str, list[str]], rows: list[dict[str, str]], effects: list[str]) -> np.ndarray:
    """[n, p]: intercept, then each effect's columns (a two-factor effect: the products of its factors' columns)."""
    cols = [np.ones((len(rows), 1))]
    for effect in effects:
        parts = [effect_columns(factors[f], [r[f] for r in rows]) for f in effect.split(":")]
        block = parts[0]
        for part in parts[1:]:
            block = np.einsum("ni,nj->nij", block, part).reshape(len(rows), -1)
        cols.append(block)
    return np.hstack(cols)


def full_rank(matrix: np.ndarray) -> bool:
    return int(np.linalg.matrix_rank(matrix)) == matrix.shape[1]


def _effects(value: Any, factors: dict[str, Any], where: str, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise UserError(f"{where}design.{key} must be a list of effects (a factor, or two joined by ':')")
    out = []
    for effect in value:
        names = effect.split(":")
        for name in names:
            if name not in factors:
                raise unknown(f"design.{key} factor", name, factors, where)
        if len(names) > 2 and key == "estimates":
            raise UserError(f"{where}design.estimates: {effect!r}: the report estimates main effects and two-factor "
                            "interactions; list higher ones under not_estimated")
        if len(set(names)) != len(names):
            raise UserError(f"{where}design.{key}: {effect!r} names a factor twice")
        canonical = ":".join(sorted(names, key=list(factors).index))
        if canonical in out:
            raise UserError(f"{where}design.{key} names {canonical!r} twice")
        out.append(canonical)
    return out


def _factors(data: Any, where: str) -> dict[str, dict[str, dict[str, Any]]]:
    raw = mapping(data, where, "design.factors")
    if len(raw) < 2:
        raise UserError(f"{where}design.factors needs at least two factors, got {len(raw)}")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    owner: dict[str, str] = {}  # config key -> the factor that sets it
    for factor, levels in raw.items():
        levels = mapping(levels, where, f"design.factors.{factor}")
        if len(levels) < 2:
            raise UserError(f"{where}design.factors.{factor} needs at least two levels, got {len(levels)}")
        out[factor] = {}
        for level, values in levels.items():
            path = f"design.factors.{factor}.{level}"
            values = mapping(values, where, path)
            typed = {}
            for key, v in values.items():
                if key not in FIELDS and not is_param_key(key):
                    raise unknown("config key", key, FIELDS, f"{where}{path}: ")
                if key in ("method", "seed"):
                    raise UserError(f"{where}{path}.{key}: a design point's {key} is not a factor level "
                                    "(design.method names the method; seeds are the suite's)")
                if owner.setdefault(key, factor) != factor:
                    raise UserError(f"{where}{path}.{key}: config key {key!r} is set by factor {owner[key]!r} too; "
                                    "a factor is named once: give each config key to one factor")
                typed[key] = coerce(key, v, f"{where}{path}.{key}: ")
                check_name(key, typed[key], f"{where}{path}.{key}: ")
            out[factor][str(level)] = typed
    return out


def in_point_order(data: Any) -> Any:
    """A design read back from disk with its factors in the order its points list their levels. A results table
    stores the suite's record as JSON with sorted keys, which reorders the factors but not the points' lists: the
    one permutation of the factors under which every point's levels are that factor's restores the order. Anything
    else (no points list, no fitting or several fitting orders) is returned as it is, for parse_design to judge."""
    if not isinstance(data, dict):
        return data
    factors, points = data.get("factors"), data.get("points")
    if not isinstance(factors, dict) or not isinstance(points, list) or not points:
        return data
    if not all(isinstance(levels, dict) for levels in factors.values()):
        return data

    def fits(order: tuple[str, ...]) -> bool:
        return all(isinstance(p, list) and len(p) == len(order)
                   and all(str(level) in factors[f] for f, level in zip(order, p)) for p in points)

    orders = [order for order in itertools.permutations(factors) if fits(order)]
    return {**data, "factors": {f: factors[f] for f in orders[0]}} if len(orders) == 1 else data


def parse_design(data: Any, where: str, varied: set[str], base_method: str | None) -> Design:
    """A suite's ``design`` block, checked before any cell: factors, points and the claimed effects' estimability;
    ``varied``: the keys the suite's grids vary (a factor's key may not be varied there too)."""
    spec = mapping(data, where, "design")
    for key in spec:
        if key not in DESIGN_KEYS:
            raise unknown("design key", key, DESIGN_KEYS, where)
    method = spec.get("method", base_method)
    if not isinstance(method, str):
        raise UserError(f"{where}design.method must name one registered method")
    check_name("method", method, f"{where}design.method: ")
    factors = _factors(spec.get("factors"), where)
    clash = sorted(varied & {k for levels in factors.values() for values in levels.values() for k in values})
    if clash:
        raise UserError(f"{where}design and grid/union both vary {', '.join(clash)}; a factor is named once")
    points = _points(spec.get("points", "full"), factors, where)
    estimates = _effects(spec.get("estimates", []), factors, where, "estimates")
    not_estimated = _effects(spec.get("not_estimated", []), factors, where, "not_estimated")
    for effect in estimates:
        if effect in not_estimated:
            raise UserError(f"{where}design: {effect!r} is listed under estimates and not_estimated")
    pairs = [":".join(p) for p in itertools.combinations(factors, 2)]
    unsaid = [p for p in pairs if p not in estimates and p not in not_estimated]
    if unsaid:
        raise UserError(f"{where}design: say whether the design estimates {', '.join(unsaid)}: list each under "
                        "design.estimates or design.not_estimated")
    _check_estimable(factors, points, estimates, not_estimated, where)
    return Design(method, factors, points, estimates, not_estimated)


def _points(value: Any, factors: dict[str, dict[str, Any]], where: str) -> list[tuple[str, ...]]:
    if value == "full":
        return list(itertools.product(*(list(levels) for levels in factors.values())))
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}design.points must be 'full' or a non-empty list of [level, ...] in factor order "
                        f"({', '.join(factors)})")
    out: list[tuple[str, ...]] = []
    for i, point in enumerate(value):
        if not isinstance(point, list) or len(point) != len(factors):
            raise UserError(f"{where}design.points[{i}] must list one level per factor ({', '.join(factors)}), "
                            f"got {point!r}")
        for factor, level in zip(factors, point):
            if str(level) not in factors[factor]:
                raise unknown(f"design.points[{i}] level of {factor}", level, factors[factor], where)
        key = tuple(str(level) for level in point)
        if key in out:
            raise UserError(f"{where}design.points[{i}] repeats the point {list(key)}")
        out.append(key)
    return out


def _check_estimable(factors: dict[str, dict[str, Any]], points: list[tuple[str, ...]], estimates: list[str],
                     not_estimated: list[str], where: str) -> None:
    levels = {f: list(v) for f, v in factors.items()}
    rows = [dict(zip(factors, p)) for p in points]
    for f in factors:
        if f not in estimates:
            raise UserError(f"{where}design.estimates must list every factor's main effect (missing {f!r})")
    # main effects first, then interactions: the first effect that loses rank is the one refused
    ordered = sorted(estimates, key=lambda e: e.count(":"))
    for k in range(len(ordered)):
        if not full_rank(model_matrix(levels, rows, ordered[: k + 1])):
            raise UserError(f"{where}design.estimates claims {ordered[k]!r}, which the {len(points)} design points "
                            f"cannot separate from {', '.join(['the intercept', *ordered[:k]])}; drop the claim "
                            "(list it under not_estimated) or add points")
    for effect in not_estimated:
        if full_rank(model_matrix(levels, rows, [*ordered, effect])):
            raise UserError(f"{where}design.not_estimated lists {effect!r}, which the design does estimate beside "
                            "the claimed effects; list it under estimates")
