"""The ``Samplers`` check: Table 1's exact Gaussian computation (``samplers/**/table1.{csv,md}``), one kernel's
excess noise against another's. There is no sampling error, so a strict comparison decides."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grpo_bench.report.claims.finding import CONTRADICTED, DEPENDS, SUPPORTED, UNDECIDED, Finding
from grpo_bench.report.claims.stored import read_csv


@dataclass(frozen=True)
class Samplers:
    """Table 1 (``REPORTS_DIR/samplers``): ``kernel``'s final marginal-variance error below ``than``'s in every
    stored block at a matched noise level (the blocks at each method's default level when none is matched),
    read against both references: the ODE's own variance (the excess noise the SDE adds, ``column``) and the true
    data variance (``data_column``). Supported where both agree, *depends on the reference* where they differ."""

    kernel: str
    than: str
    column: str = "excess_final_var_err"
    data_column: str = "final_var_err"
    quantifier: str = "every"

    @property
    def what(self) -> str:
        return (f"abs(final variance error) against the ODE's variance and against the data's: {self.kernel} < "
                f"{self.than}, every matched block")

    def findings(self, folder: Path) -> list[Finding]:
        blocks = []
        for csv in sorted(folder.rglob("table1.csv")):
            md = csv.with_name("table1.md")
            head = md.read_text() if md.is_file() else ""
            steps = re.search(r"T = (\d+)", head)
            level = re.search(r"every kernel at noise level ([0-9.eE+-]+)", head)
            blocks.append((int(steps.group(1)) if steps else None, float(level.group(1)) if level else None, csv))
        matched = [b for b in blocks if b[1] is not None] or blocks
        out = []
        for steps, level, csv in sorted(matched, key=lambda b: (b[0] or 0, b[1] or 0)):
            frame = read_csv(csv, ["kernel"], [], optional=[self.column, self.data_column, "noise_energy"])
            mine = frame[frame["kernel"].str.split().str[0] == self.kernel]
            other = frame[frame["kernel"].str.split().str[0] == self.than]
            label = f"T = {steps}, " + (f"noise level {level:g}" if level is not None else "default levels")
            if mine.empty or other.empty or self.column not in frame:
                out.append(Finding(label, UNDECIDED, "kernel missing from Table 1"))
                continue
            a, b = abs(float(mine[self.column].iloc[0])), abs(float(other[self.column].iloc[0]))
            sides = [a < b]
            text = f"vs ODE {a:.4f} vs {b:.4f}"
            if self.data_column in frame:
                da, db = abs(float(mine[self.data_column].iloc[0])), abs(float(other[self.data_column].iloc[0]))
                sides.append(da < db)
                text += f"; vs data {da:.4f} vs {db:.4f}"
            verdict = SUPPORTED if all(sides) else (CONTRADICTED if not any(sides) else DEPENDS)
            if a == b:
                verdict = UNDECIDED
            energy = ""
            if "noise_energy" in frame:
                energy = (f"; noise energy {float(mine['noise_energy'].iloc[0]):.3f} vs "
                          f"{float(other['noise_energy'].iloc[0]):.3f}")
            out.append(Finding(label, verdict, f"{text} (exact){energy}", b - a))
        return out or [Finding("Table 1", UNDECIDED, f"no table1.csv under {folder}")]
