"""``grpo-bench suites`` (issue 45, item 3): every suite with its cell count and a measured cost: this machine's
finished cells first, else the stored results' cells (naming the machine they ran on), else "not measured"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.suite.expand import expand
from grpo_bench.suite.machine import host
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.tune import tuning_suite

ROOT = Path(__file__).resolve().parents[2]


def _rows(path: Path, cells: list[tuple[float, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"kind": "cell", "metric": "wall_time", "value": s,
                   "text": json.dumps({"machine": m, "config": {"updates": 10}})} for s, m in cells]
                 + [{"kind": "final", "metric": "reward", "value": 0.5, "text": None}]).to_parquet(path)


def test_suites_lists_cells_and_the_measured_minutes_a_cell(tmp_path):
    suites = tmp_path / "suites"
    suites.mkdir()
    for name in ("smoke", "main_table", "ablate_kl", "factors_best"):
        shutil.copy(ROOT / "suites" / f"{name}.yaml", suites)
    shutil.copytree(ROOT / "suites" / "prompts", suites / "prompts")
    other = "Other CPU, 64 CPUs, no GPU, torch 2, Linux"
    _rows(tmp_path / "reports" / "main_table" / "results.parquet", [(60.0, other), (120.0, other), (600.0, other)])
    # smoke ran here: 30 s and 90 s a cell
    for name, seconds in (("abc", 30.0), ("def", 90.0)):
        cell = tmp_path / "runs" / "smoke" / name
        _rows(cell / "rows.parquet", [(seconds, f"{host()}, no GPU, torch 2, Linux")])
        (cell / "DONE").write_text("")
    result = CliRunner().invoke(app, ["suites", "--suites", str(suites), "--runs", str(tmp_path / "runs"),
                                      "--reports", str(tmp_path / "reports")], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    lines = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]]
             for ln in result.output.splitlines() if ln.count("│") > 3}
    main = load_suite(suites / "main_table.yaml")
    n_grid, n_table = len(expand(tuning_suite(main))), len(expand(main))
    total = f"{2.0 * (n_grid + n_table) / 60:.1f} h"
    assert lines["main_table"][:3] == [f"{n_grid} tuning + {n_table}", "2.0 min", total]
    assert lines["main_table"][3].startswith("Other CPU, 64 CPUs")  # the median of 1, 2 and 10 minutes, and where
    smoke = len(expand(load_suite(suites / "smoke.yaml")))
    assert lines["smoke"][:3] == [str(smoke), "1.0 min", f"{smoke * 1.0:.0f} min"]
    assert "this machine" in lines["smoke"][3]
    assert lines["ablate_kl"][1:3] == ["-", "-"] and lines["ablate_kl"][3] == "not measured"
    # pre-registered, its source report not stored here: listed as waiting, the others still listed
    assert lines["factors_best"][:3] == ["-", "-", "-"]
    assert lines["factors_best"][3].startswith("waits for the stored report its pick reads")
