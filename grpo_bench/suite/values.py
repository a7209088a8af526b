"""Checks of the values a suite file writes (mappings, config values, grids), each error worded with the
file and key path (``grid.kl[2]``) and the allowed values. Shared by parse.py and report_section.py."""

from __future__ import annotations

from typing import Any

from grpo_bench.config.run import FIELDS, coerce, flatten_sections
from grpo_bench.errors import UserError, unknown
from grpo_bench.params import is_param_key


def mapping(value: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{where}{what} must be a mapping of key: value, got {type(value).__name__}")
    return value


def check_name(key: str, value: Any, where: str) -> None:
    """Names are checked where they are written, so the error shows the key path."""
    if key == "method":
        from grpo_bench.core.method import METHODS

        METHODS.get(value, where=where)
    elif key == "setting":
        from grpo_bench.rewards.base import SETTINGS

        if value not in SETTINGS:
            raise unknown("setting", value, SETTINGS, where)
    elif key == "kl" and value is not None:
        from grpo_bench.core.trust_region import KL_VARIANTS

        KL_VARIANTS.get(value, where=where)


def config_values(data: Any, where: str, what: str, allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A mapping of run config values (sections flattened), each coerced to its field's type."""
    out = {}
    for key, value in flatten_sections(mapping(data, where, what), f"{where}{what}: ").items():
        if allowed is not None and key not in allowed:
            raise unknown(f"{what} key", key, allowed, where)
        out[key] = coerce(key, value, f"{where}{what}.{key}: ")
        check_name(key, out[key], f"{where}{what}.{key}: ")
    return out


def grid_values(data: Any, where: str, path: str) -> dict[str, list[Any]]:
    """A grid (``grid`` or a ``union`` entry): config key -> non-empty list of coerced values."""
    grid = mapping(data, where, path)
    if not grid:
        raise UserError(f"{where}{path} is empty; give at least one key: [values] (or leave it out)")
    out = {}
    for key, values in grid.items():
        if key == "seed":
            raise UserError(f"{where}{path}.seed: seeds go in the top-level 'seeds' list, not in a grid")
        if key not in FIELDS and not is_param_key(key):
            raise unknown("config key", key, FIELDS, f"{where}{path}: ")
        if not isinstance(values, list):
            raise UserError(f"{where}{path}.{key} must be a list of values, got {values!r}")
        if not values:
            raise UserError(f"{where}{path}.{key} is an empty list; give at least one value")
        out[key] = []
        for i, v in enumerate(values):
            item = coerce(key, v, f"{where}{path}.{key}[{i}]: ")
            check_name(key, item, f"{where}{path}.{key}[{i}]: ")
            out[key].append(item)
    return out
