"""docs/real_models.md's memory and time figures are `grpo-bench plan`'s own output: the table between its
plan-figures markers equals what benchmarks/plan_figures.py computes from the plan now, a row agrees with the
numbers `grpo-bench plan SUITE` prints, and no suite figure is quoted in the prose outside the table (where
nothing would hold it to the plan)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import plan_figures  # noqa: E402

PLAN_FIGURE = re.compile(  # a figure may wrap over a line break
    r"\d[\d.,]*\s*GB\s+(?:per\s+(?:GPU|process)|GPU\s+and|host|of\s+host)"  # '39 GB GPU and', '17.4 GB per GPU'
    r"|\d[\d.,]*(?:-\d[\d.,]*)?\s*(?:s|min|h)\s+per\s+(?:update|cell)"  # '48-53 s per update', '6.7 h per cell'
    r"|\d[\d.,]*\s+node-days")  # '~8.4 node-days'


HAND_WRITTEN = ("grpo-bench plan suites/sd35_flow_grpo.yaml  # 8 GPUs: 17.4 GB per GPU, 3.9 min per update, 19.4 h "
                "per cell\n`hunyuan15_main_table` (LoRA, 49 frames, guidance 6) up to ~39 GB GPU and ~37 GB host per "
                "process, 48-53 s\nper update, 4.0-4.4 h per cell, ~8.4 node-days")


def _row(table: str, suite: str) -> list[str]:
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == f"`{suite}`":
            return cells
    raise AssertionError(f"no row for {suite}")


def test_the_docs_plan_figures_are_what_plan_computes_now():
    doc = plan_figures.doc_table(plan_figures.DOC.read_text())
    assert doc == plan_figures.table(), ("docs/real_models.md: the plan figures differ from `grpo-bench plan`; run "
                                         "`python benchmarks/plan_figures.py --write`")
    names = [line.strip("|").split("|")[0].strip() for line in doc.splitlines()[2:]]
    assert names == [f"`{p.name}`" for p in plan_figures.real_model_suites()]
    assert {"`hunyuan15_paper.yaml`", "`sd35_flow_grpo.yaml`", "`wan_small.yaml`"} <= set(names)


def test_a_row_agrees_with_what_the_plan_command_prints():
    """The wan_small row against `grpo-bench plan suites/wan_small.yaml`'s own lines (worst cell, totals)."""
    from grpo_bench.cli import app

    out = CliRunner().invoke(app, ["plan", str(ROOT / "suites" / "wan_small.yaml")], terminal_width=250).output
    worst = re.search(r"worst cell ([\d.]+) GB GPU, ([\d.]+) GB host per process", out)
    total = re.search(r"([\d,]+) GPU-hours = ([\d.,]+) node-days", out)
    assert worst and total, out
    row = _row(plan_figures.doc_table(plan_figures.DOC.read_text()), "wan_small.yaml")
    gpu, host, gpu_hours, node_days = row[4], row[5], row[8], row[9]
    assert gpu.split("–")[-1] == worst.group(1) and host.split("–")[-1] == worst.group(2)
    assert (gpu_hours, node_days) == (total.group(1), total.group(2))


def test_no_suite_figure_is_quoted_outside_the_generated_table():
    text = plan_figures.DOC.read_text()
    outside = text.replace(plan_figures.doc_table(text), "")
    assert PLAN_FIGURE.findall(outside) == []
    # the pattern finds the figures the prose quoted by hand before the table existed (and had let drift)
    assert PLAN_FIGURE.findall(HAND_WRITTEN) == ["17.4 GB per GPU", "3.9 min per update", "19.4 h per cell",
                                                 "39 GB GPU and", "37 GB host", "48-53 s\nper update",
                                                 "4.0-4.4 h per cell", "8.4 node-days"]
    assert PLAN_FIGURE.findall("Wan 2.1 1.3B on one 80 GB GPU: the wan_small suite") == []  # hardware, not plan
