"""The level a suite's comparisons are decided at in the ledger: 5%, or, for a suite run under a sequential plan
(``grpo-bench run --until-decided``, report/sequential.py), the level its spending function spends at the look
its stored seeds reached.

A suite that adds seeds in looks is tested again at every look; reading its stored rows at 5% would spend the whole
alpha at one look and void the plan's guarantee. So the ledger reads them as a look of that plan: with the plan's
looks (the seeds at each, stored in the suite's ``decide`` record) and the number of seeds the stored cells hold
(n), the level is what the Lan-DeMets O'Brien-Fleming function newly spends at n, after the planned looks below n
(``power.look_levels``). At a planned look this is exactly the level ``run --until-decided`` decided that look at;
between two (a look in progress) it is the spending function's level for an unplanned look at n, smaller than the
next planned look's. The overall alpha is the ledger's own 5%: the record's numbers are data from disk, so only
its plan (the seeds at each look) is read, and it is checked first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from grpo_bench.errors import UserError
from grpo_bench.report.power import ALPHA, look_levels
from grpo_bench.report.sequential import SPENDING


@dataclass(frozen=True)
class Look:
    """Where a sequential suite's stored seeds stand in its plan, and the level that spends."""

    look: int
    """1-based: the planned look the stored seeds reached (a look in progress counts as the next one)."""
    planned: tuple[int, ...]
    seeds: int
    level: float

    @property
    def text(self) -> str:
        on_plan = self.seeds in self.planned
        return (f"look {self.look} of {len(self.planned)} ({self.seeds} seeds{'' if on_plan else ', in progress'}) "
                f"of its sequential plan, decided at level {self.level:.2g} ({SPENDING})")


NOMINAL = None
"""A suite with no sequential plan: its comparisons are decided at ``ALPHA``."""


def suite_look(info: dict, seeds: Iterable[int], where: str) -> Look | None:
    """The look of a stored suite (``info``: its suite record) whose cells hold ``seeds``; None (``NOMINAL``)
    when it ran no sequential plan. A malformed plan is one line naming ``where`` and the key."""
    decide = info.get("decide")
    if decide is None:
        return NOMINAL
    if not isinstance(decide, dict):
        raise UserError(f"{where}: key 'decide' is a {type(decide).__name__}; expected the object "
                        "`run --until-decided` stores")
    planned = decide.get("planned")
    if (not isinstance(planned, list) or not planned or not all(type(p) is int and p >= 1 for p in planned)
            or any(b <= a for a, b in zip(planned, planned[1:]))):
        raise UserError(f"{where}: key 'decide.planned' is {planned!r}; expected the seeds at each look, "
                        "increasing positive integers")
    n = len(set(seeds))
    if n < 1:
        return NOMINAL
    if n > planned[-1]:
        raise UserError(f"{where}: the cells hold {n} seeds, more than the plan's last look "
                        f"('decide.planned' ends at {planned[-1]})")
    before = [p for p in planned if p < n]
    level = look_levels([*before, n], planned[-1], ALPHA)[-1]
    return Look(len(before) + 1, tuple(planned), n, level)


def level_of(look: Look | None) -> float:
    return ALPHA if look is None else look.level


def confidence(level: float) -> str:
    """'95%' at 5%, '99.45%' at 0.0055: the interval a level reads as."""
    return f"{100 * (1 - level):.4g}%"
