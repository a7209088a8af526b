"""The ``Spread`` check: how unequally a sampler's steps pull, from the stored per-step gradient norms
(max / min over steps of the mean measured norm, its geometric mean's interval over seeds against a bound)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grpo_bench.report import data
from grpo_bench.report.claims.finding import CONTRADICTED, SUPPORTED, UNDECIDED, Finding, t_strength
from grpo_bench.report.claims.suite import Suite, Where, where_text
from grpo_bench.report.power import seeds_needed
from grpo_bench.report.stats import mean_ci


@dataclass(frozen=True)
class Spread:
    """Per-step gradient spread (max / min over steps of the mean measured norm) of the rows matching
    ``row``, one finding per ``split`` family: its 95% interval over seeds below (``below``) or above ``bound``."""

    row: Where
    bound: float
    below: bool
    split: tuple[str, ...] = ("method",)
    quantifier: str = "every"

    @property
    def what(self) -> str:
        side = "<" if self.below else ">"
        return f"{where_text(self.row)}: per-step gradient spread {side} {self.bound:g}× ({self.quantifier} " \
               f"{', '.join(self.split)})"

    def findings(self, suite: Suite) -> list[Finding]:
        grads = data.grads(suite.df)
        out = []
        for family, cells in suite.families({}, self.split).items():
            out += suite.set_aside_findings(cells, self.row)
            for group in suite.groups(cells, self.row):
                standing = suite.standing(cells, group)
                logs = []
                for _, part in grads[grads["cell"].isin(cells) & (grads["group"] == group)].groupby("seed"):
                    arr = np.vstack([np.asarray(a, dtype=float) for a in part["array"]])
                    with np.errstate(all="ignore"), _quiet():
                        mean = np.nanmean(arr, axis=0)
                    ok = np.isfinite(mean) & (mean > 0)
                    if ok.sum() > 1:
                        logs.append(math.log(mean[ok].max() / mean[ok].min()))
                found = self._finding(f"{group} ({family})", np.asarray(logs))
                if standing:  # measured and shown, not decided
                    verdict, why, needed = standing
                    found = Finding(found.label, verdict, f"{found.effect}; {verdict}: {why}", needed=needed)
                out.append(found)
        return out or [Finding(where_text(self.row), UNDECIDED, "no gradient diagnostics stored")]

    def _finding(self, label: str, logs: np.ndarray) -> Finding:
        """Geometric mean spread and its interval against the bound (a one-sample t-test on the log)."""
        mean, half, n = mean_ci(logs)
        if n == 0:
            return Finding(label, UNDECIDED, "no gradient diagnostics stored")
        lo, hi = (math.exp(mean - half), math.exp(mean + half)) if math.isfinite(half) else (math.nan, math.nan)
        effect = f"{math.exp(mean):.1f}×" + (f" [{lo:.1f}, {hi:.1f}]" if math.isfinite(lo) else "") + f" ({n} seeds)"
        gap = (math.log(self.bound) - mean) * (1 if self.below else -1)  # > 0: on the claimed side
        strength, sd = t_strength(logs, gap, n)
        if not math.isfinite(lo):
            return Finding(label, UNDECIDED, effect, strength)
        if (hi < self.bound) if self.below else (lo > self.bound):
            return Finding(label, SUPPORTED, effect, strength)
        if (lo > self.bound) if self.below else (hi < self.bound):
            return Finding(label, CONTRADICTED, effect, strength)
        return Finding(label, UNDECIDED, effect, strength, seeds_needed(abs(gap), sd) if sd > 0 else None)


class _quiet:
    """Silence numpy's all-NaN warnings (an untrained step)."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)
