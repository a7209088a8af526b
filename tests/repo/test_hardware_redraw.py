"""benchmarks/hardware_redraw.py: the spread a second machine adds to the same cells, against the seeds' own."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import hardware_redraw  # noqa: E402


def test_the_seed_spread_is_the_residual_of_a_method_plus_seed_fit():
    """Additive method and seed effects plus residuals whose rows and columns sum to 0: the fit leaves exactly
    those residuals, whose squares sum to 4 over (3 - 1) x (3 - 1) degrees of freedom, so the spread is 1."""
    residual = np.array([[1, -1, 0], [-1, 1, 0], [0, 0, 0]], dtype=float)
    values = np.array([0.1, 0.5, -0.2])[:, None] + np.array([2.0, 3.0, 5.0])[None, :] + residual
    cells = pd.DataFrame([{"seed": s, "method": m, "learning": values[i, j]}
                          for i, s in enumerate([7, 8, 9]) for j, m in enumerate("abc")])
    assert hardware_redraw.residual_sd(cells) == pytest.approx(1.0)
    assert math.isnan(hardware_redraw.residual_sd(cells[cells["seed"] == 7]))  # one seed: no spread to read


def test_a_table_against_itself_reproduces_every_cell():
    """The stored image-world table paired with itself: every cell pairs, the machines add no spread, the update-0
    evals agree, each seed orders the methods alike on both, and each world's agreement is the transfer table's."""
    table = hardware_redraw.table(ROOT / "reports" / "field_image")
    got = hardware_redraw.compare(table, table)
    assert got["cells_paired"] == 90 and got["update0_largest_gap"] == 0.0
    assert len(got["worlds"]) == 3
    for world in got["worlds"].values():
        assert world["cells"] == 30 and world["correlation"] == pytest.approx(1.0) and world["machine_sd"] == 0.0
        assert world["seed_sd"][0] == world["seed_sd"][1] > 0
        assert list(world["tau_by_seed"].values()) == pytest.approx([1.0, 1.0, 1.0])
        assert world["tau_mean_ranks"]["tau"] == pytest.approx(1.0)
        assert world["agreement"][0] == world["agreement"][1]
    assert got["worlds"]["image_world / image_world_oracle"]["agreement"][0]["w"] == pytest.approx(0.69, abs=0.005)


def test_the_stored_re_draw_is_what_the_docs_quote():
    """reports/field_image_blocks/xeon_redraw.parquet (the first look's 90 cells re-run at 96d84c7 on an Intel Xeon
    with AMX) against the stored table: the numbers docs/image_world.md and the README quote."""
    stored, redraw = ROOT / "reports" / "field_image", ROOT / "reports" / "field_image_blocks" / "xeon_redraw.parquet"
    got = hardware_redraw.compare(hardware_redraw.table(stored), hardware_redraw.table(redraw))
    assert got["cells_paired"] == 90 and got["update0_largest_gap"] == pytest.approx(0.0211, abs=5e-4)
    oracle, judge = got["worlds"]["image_world / image_world_oracle"], got["worlds"]["image_world / image_world_judge"]
    assert (round(oracle["correlation"], 2), round(oracle["machine_sd"], 3)) == (0.60, 0.037)
    assert round(oracle["tau_mean_ranks"]["tau"], 2) == 0.14 and round(judge["tau_mean_ranks"]["tau"], 2) == 0.71


def test_a_partial_re_draw_orders_the_methods_both_machines_ran():
    """A re-draw stopped part-way (its cells run method by method) against the whole table: the orders are compared
    over the methods both hold, so the table against its own first methods agrees."""
    table = hardware_redraw.table(ROOT / "reports" / "field_image")
    cells = table.loc[table["kind"] == "cell", ["cell", "method"]].drop_duplicates()
    kept = set(cells.loc[cells["method"].isin(["dance_grpo", "flow_grpo", "cps", "sage_grpo"]), "cell"])
    part = table[table["cell"].isin(kept) | (table["kind"] == "suite")]
    got = hardware_redraw.compare(table, part)
    oracle = got["worlds"]["image_world / image_world_oracle"]
    assert oracle["cells"] == 12 and oracle["methods"] == 4
    assert list(oracle["tau_by_seed"].values()) == pytest.approx([1.0, 1.0, 1.0])
    assert oracle["agreement"][0] == oracle["agreement"][1]  # both read over the same four methods


def test_the_stored_avx2_re_draw_is_what_the_docs_quote():
    """reports/field_image_blocks/epyc_avx2_redraw.parquet (the first look's 90 cells re-run at 96d84c7 on an AMD
    EPYC with AVX2 only, at fp32) against the stored table and the Xeon's: the numbers docs/image_world.md and the
    README quote."""
    blocks = ROOT / "reports" / "field_image_blocks"
    stored, avx2 = hardware_redraw.table(ROOT / "reports" / "field_image"), hardware_redraw.table(
        blocks / "epyc_avx2_redraw.parquet")
    got = hardware_redraw.compare(stored, avx2)
    assert got["cells_paired"] == 90 and got["update0_largest_gap"] == pytest.approx(0.0176, abs=5e-4)
    oracle, judge = got["worlds"]["image_world / image_world_oracle"], got["worlds"]["image_world / image_world_judge"]
    assert (round(oracle["correlation"], 2), round(oracle["machine_sd"], 3)) == (0.65, 0.035)
    assert round(oracle["agreement"][1]["w"], 2) == 0.79 and round(judge["agreement"][1]["w"], 2) == 0.70
    assert round(oracle["tau_mean_ranks"]["tau"], 2) == 0.23 and round(judge["tau_mean_ranks"]["tau"], 2) == 0.70
    between = hardware_redraw.compare(hardware_redraw.table(blocks / "xeon_redraw.parquet"), avx2)
    assert round(between["worlds"]["image_world / image_world_oracle"]["tau_mean_ranks"]["tau"], 2) == 0.63
