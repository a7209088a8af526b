"""benchmarks/store_block.py: a block of a run folder's finished cells that no stored table holds, restorable as it
was, with strips only where a report draws them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grpo_bench.suite.restore import restore_cells
from grpo_bench.suite.results import load_results

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import store_block  # noqa: E402

STORED = ROOT / "reports" / "main_table_tune" / "results.parquet"


@pytest.fixture(scope="module")
def stored():
    return load_results(STORED)


def _cells(frame, seed=None):
    cells = frame[frame["kind"] == "cell"]
    if seed is not None:
        cells = cells[cells["seed"] == seed]
    return sorted(cells["cell"].astype(str).unique())


def test_block_holds_the_cells_no_other_table_holds_and_restores_them(tmp_path, stored):
    ids = _cells(stored)
    held, new = ids[:4], ids[4:10]
    run = tmp_path / "run"
    restore_cells(STORED, run, only=set(held + new))
    other = tmp_path / "other.parquet"
    store_block.store_block(run, other, [], None)
    restore_cells(other, tmp_path / "held", only=set(held))  # a stored table holding the first four
    store_block.store_block(tmp_path / "held", other, [], None)

    out = tmp_path / "block.parquet"
    frame = store_block.store_block(run, out, [other], None)
    assert _cells(frame) == new
    block = load_results(out)
    for cell in new:  # every row of each new cell, as the stored table had it
        want = stored[stored["cell"] == cell].reset_index(drop=True)
        got = block[block["cell"] == cell].reset_index(drop=True)
        assert len(got) == len(want)
        assert got["value"].fillna(-1).tolist() == want["value"].fillna(-1).tolist()
        assert got["metric"].tolist() == want["metric"].tolist()
    restored, _ = restore_cells(out, tmp_path / "again")
    assert sorted(restored) == new


def test_strips_kept_for_the_named_seed_only(tmp_path, stored):
    seeds = sorted(int(s) for s in stored.loc[stored["kind"] == "cell", "seed"].unique())
    low = seeds[0]
    ids = _cells(stored, low)[:2] + _cells(stored, seeds[1])[:2]
    run = tmp_path / "run"
    restore_cells(STORED, run, only=set(ids))
    frame = store_block.store_block(run, tmp_path / "b.parquet", [], low)
    strips = frame[frame["kind"] == "strip"]
    assert len(strips) > 0 and set(strips["seed"].astype(int)) == {low}
    full = stored[stored["cell"].isin(ids)]
    assert len(frame) == len(full) - int(((full["kind"] == "strip") & (full["seed"] != low)).sum())


def test_nothing_to_store_writes_nothing(tmp_path):
    run = tmp_path / "run"
    restore_cells(STORED, run, only=set(_cells(load_results(STORED))[:2]))
    assert store_block.store_block(run, tmp_path / "b.parquet", [STORED], None) is None
    assert not (tmp_path / "b.parquet").exists()
    assert store_block.main([str(tmp_path / "nope"), str(tmp_path / "b.parquet")]) == 2
