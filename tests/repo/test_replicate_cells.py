"""benchmarks/replicate_cells.py: a stored cell re-run from its recorded config and compared value by value; a
changed value is found and named, timings and one-sided metrics are not compared, one cell per (row, commit)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from grpo_bench.suite.cell import run_cell
from grpo_bench.suite.results import load_results
from grpo_bench.suite.rows import cell_rows

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import replicate_cells  # noqa: E402

FAKE = "suite_support:fake_train"  # deterministic: the same config writes the same numbers
STORED = ROOT / "reports" / "field_blocks" / "unchanged_rows_looks1_2.parquet"


@pytest.fixture
def stored(tmp_path):
    """One finished cell's rows, as a suite stores them."""
    from suite_support import EVAL_PROMPTS  # noqa: F401  (tests/_support on the path)

    from grpo_bench.config.identity import cell_id
    from grpo_bench.config.run import RunConfig

    cfg = RunConfig(method="flow_grpo", updates=3, seed=7, device="cpu")
    meta = {"id": cell_id(cfg), "suite": "s", "labels": {"seed": 7}, "group": "flow_grpo", "config": cfg.to_dict()}
    out = tmp_path / "first" / meta["id"]
    assert run_cell(meta, str(out), FAKE, emit=lambda _: None).status == "done"
    return cell_rows(out, meta), meta["id"]


def test_a_faithful_rerun_is_identical_and_a_changed_value_is_named(tmp_path, stored):
    frame, cell = stored
    rec = replicate_cells.replicate(frame, cell, tmp_path / "again", trainer=FAKE)
    assert rec["identical"] and rec["values_compared"] > 0 and rec["max_abs_diff"] == 0.0

    tampered = frame.copy()
    at = tampered.index[(tampered["kind"] == "update") & (tampered["metric"] == "reward")][1]
    tampered.loc[at, "value"] += 0.25
    rec = replicate_cells.replicate(tampered, cell, tmp_path / "third", trainer=FAKE)
    assert not rec["identical"]
    assert rec["differing_metrics"] == {"reward": pytest.approx(0.25)}


def test_timings_and_one_sided_metrics_are_not_compared():
    a = load_results(STORED)
    one = a[a["cell"] == a["cell"].dropna().iloc[0]]
    base = replicate_cells.values(one)
    assert base and not any(replicate_cells._timing(k[2]) for k in base)
    measured = set(one["metric"].dropna().astype(str))
    assert {"compute_seconds", "wall_time"} <= measured  # a timing the stored cell holds, never compared
    assert not {"compute_seconds", "wall_time"} & {k[2] for k in base}
    fresh = dict(base)
    fresh[("final", None, "new_observation", None, None, 0)] = 1.0
    got = replicate_cells.compare(base, fresh)
    assert got["identical"] and got["only_replicated"] == ["new_observation"] and got["only_stored"] == []
    nan_key = next(k for k in base)
    got = replicate_cells.compare({**base, nan_key: float("nan")}, fresh)
    assert not got["identical"] and got["differing_metrics"] == {nan_key[2]: float("inf")}


def test_one_cell_per_row_and_commit_the_lowest_seed():
    frame = load_results(STORED)
    cells = frame[frame["kind"] == "cell"].drop_duplicates("cell")
    pairs: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for row in cells.itertuples():
        info = json.loads(row.text)
        if int(info["config"]["seed"]) in (1000, 1001, 1002):
            pairs.setdefault((row.group, info["git_commit"]), []).append((int(info["config"]["seed"]), row.cell))
    chosen = replicate_cells.choose(frame, [1000, 1001, 1002])
    assert sorted(chosen) == sorted(min(v)[1] for v in pairs.values())
    assert len(chosen) == len(pairs) > 1


def test_unknown_cells_and_a_damaged_record_are_one_line(tmp_path, capsys):
    out = tmp_path / "rec.json"
    assert replicate_cells.main([str(STORED), "--cells", "feedfacecafe", "--out", str(out)]) == 2
    assert "feedfacecafe" in capsys.readouterr().err
    out.write_text('{"not": "a list"}')
    cell = replicate_cells.choose(load_results(STORED), [1000])[0]
    assert replicate_cells.main([str(STORED), "--cells", cell, "--out", str(out)]) == 2
    assert "not a list of replication records" in capsys.readouterr().err
