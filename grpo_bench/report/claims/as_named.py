"""Whether the rows a claim reads are the rows it names.

A paper's claim names each method at its tuned setting, measured on seeds that no development or tuning run
touched (docs/statistics.md "Tuning parity and seeds"). A stored row tests it as named only where

- every cell ran on test seeds (``suite.tune.TEST_SEEDS_FROM`` and up: not development seeds 0–99, not tuning
  seeds 100–999), and
- the suite's tuning record (``<suite>/tuned.json``, written beside the results by ``grpo-bench run``) holds a
  choice for the row itself (the method under exactly the reading its cells' labels carry: ``sage_grpo [kl=dual]``,
  named as ``suite.tune.tuned_rows`` names it) and every cell ran at that choice. A row without a choice of its own
  that ran at another row's (a record keyed by method, from before every reading was tuned apart) *borrowed* it.

Otherwise the comparison's verdict is ``NOT_AS_NAMED`` with the reasons, instead of supported / contradicted.
The record is data from disk: a malformed one is refused in one line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_bench.errors import UserError
from grpo_bench.report.claims.finding import NOT_AS_NAMED
from grpo_bench.suite.tune import DEV_SEEDS, ROW_FREE, TEST_SEEDS_FROM, row_name

TUNED = "tuned.json"
__all__ = ["NOT_AS_NAMED", "TUNED", "TUNED_ON_TEST_SEEDS", "AsNamed", "read_tuned", "seed_reasons", "setting_reasons"]


@dataclass(frozen=True)
class AsNamed:
    """What a claim's rows must be for the claim to be tested as it is stated."""

    test_seeds: bool = True
    tuned: bool = True


TUNED_ON_TEST_SEEDS = AsNamed()
"""The paper's claims: each row at its own tuned choice, on test seeds."""


def read_tuned(folder: Path) -> dict[str, dict[str, Any]] | None:
    """``folder / tuned.json``'s choices, {row: {key: value}}; None when the suite stored no tuning record."""
    path = Path(folder) / TUNED
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); expected {{\"methods\": {{row: {{\"chosen\": {{...}}}}}}}}"
                        ) from None
    rows = raw.get("methods") if isinstance(raw, dict) else None
    if not isinstance(rows, dict):
        raise UserError(f"{path}: key 'methods' missing or not an object; expected {{row: {{\"chosen\": {{...}}}}}}")
    out = {}
    for row, entry in rows.items():
        chosen = entry.get("chosen") if isinstance(entry, dict) else None
        if not isinstance(chosen, dict):
            raise UserError(f"{path}: key 'methods.{row}.chosen' missing or not an object of tuned values")
        out[str(row)] = chosen
    return out


def _seed_text(seeds: list[int]) -> str:
    seeds = sorted(seeds)
    return f"{seeds[0]}–{seeds[-1]}" if len(seeds) > 2 else ", ".join(map(str, seeds))


def _value_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def seed_reasons(seeds: list[int]) -> list[str]:
    dev = [s for s in seeds if s in DEV_SEEDS]
    tuning = [s for s in seeds if s not in DEV_SEEDS and s < TEST_SEEDS_FROM]
    return ([f"development seeds {_seed_text(dev)}"] if dev else []) + (
        [f"tuning seeds {_seed_text(tuning)}"] if tuning else [])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def setting_reasons(choices: dict[str, dict[str, Any]] | None, method: str, reading: dict[str, Any],
                    first_reading: bool, ran: list[dict[str, Any]]) -> list[str]:
    """Why a row's cells (their configs ``ran``) are not at its own tuned choice; [] when they are.

    ``reading``: the row's keys beyond the method (its cells' labels but the free keys, the seed and the tuned
    keys); ``first_reading``: the row is its method's first in the suite, which a record keyed by method names."""
    lr = sorted({_value_text(c.get("lr")) for c in ran})
    if choices is None:
        return [f"untuned (lr {', '.join(lr)}; no {TUNED} beside the results)"]
    name = row_name(method, reading) if reading else method
    keyed = {_row_key(row): chosen for row, chosen in choices.items()}
    own = keyed.get(_row_key(name), choices.get(method) if first_reading else None)
    if own is None:
        lent = choices.get(method)
        if lent is None:
            return [f"untuned (lr {', '.join(lr)}; {TUNED} has no choice for `{name}`)"]
        point = ", ".join(f"{k} {_value_text(v)}" for k, v in lent.items())
        return [f"borrowed lr: ran at `{method}`'s choice ({point}); `{name}` has no tuned choice of its own"]
    off = [k for k, v in own.items() if any(not _same(c.get(k), v) for c in ran)]
    return [f"ran at {k} {', '.join(sorted({_value_text(c.get(k)) for c in ran}))}, its tuned choice is "
            f"{_value_text(own[k])}" for k in off]


def _row_key(name: str) -> tuple[str, frozenset[str]]:
    """A row name's method and its set of ``key=value`` words: the record's order of a reading's keys (the suite's)
    need not be the labels' order."""
    method, _, rest = name.partition(" [")
    return method, frozenset(rest.rstrip("]").split())


def reading_of(labels: dict[str, Any], tuned_keys: set[str]) -> dict[str, Any]:
    """A cell's row reading: its labels but the keys that never make a row, the seed and the tuned keys."""
    return {k: v for k, v in sorted(labels.items()) if k not in (*ROW_FREE, "seed", *tuned_keys)}
