"""The ``WinRates`` check: a human study's win rates (``analysis/table3.csv`` of a study kit stored under the
reports folder; raters and prompts resampled), each interval against 0.5."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from grpo_bench.errors import UserError
from grpo_bench.report.claims.finding import CONTRADICTED, SUPPORTED, UNDECIDED, Finding
from grpo_bench.report.claims.stored import read_csv


@dataclass(frozen=True)
class WinRates:
    """A human study of ``target`` against each baseline (``analysis/table3.csv`` of a kit stored under the
    reports folder): the 95% interval of every win rate above 0.5."""

    target: str
    quantifier: str = "every"

    @property
    def what(self) -> str:
        return f"human win rate of {self.target} against each baseline, per dimension, > 0.5"

    def findings(self, folder: Path) -> list[Finding]:
        tables = [p for p in sorted(folder.rglob("table3.csv")) if p.parent.name == "analysis"]
        out = []
        for path in tables:
            frame = read_csv(path, ["target", "baseline", "dimension"], ["votes", "rate", "ci_low", "ci_high"])
            frame["votes"] = frame["votes"].fillna(0)
            if (frame["votes"] < 0).any() or frame.loc[frame["votes"] > 0, ["rate", "ci_low", "ci_high"]].isna().any(
                    axis=None):
                raise UserError(f"{path}: votes must be >= 0, and a row with votes needs its rate and interval")
            frame = frame[frame["target"].astype(str).str.contains(self.target, regex=False)]
            for r in frame.itertuples():
                label = f"{r.target} vs {r.baseline}, {r.dimension}"
                if not r.votes:
                    out.append(Finding(label, UNDECIDED, "no votes"))
                    continue
                effect = f"{r.rate:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] ({int(r.votes)} votes)"
                verdict = SUPPORTED if r.ci_low > 0.5 else (CONTRADICTED if r.ci_high < 0.5 else UNDECIDED)
                half, gap = (r.ci_high - r.ci_low) / 2, abs(r.rate - 0.5)
                needed = math.ceil(r.votes * (half / gap) ** 2) if verdict == UNDECIDED and gap > 0 else None
                out.append(Finding(label, verdict, effect, (r.rate - 0.5) / half if half > 0 else math.nan,
                                   needed, "votes"))
        return out or [Finding("human study", UNDECIDED, "no human votes stored (no analysis/table3.csv)",
                               needed="a human study (docs/human_study.md)")]
