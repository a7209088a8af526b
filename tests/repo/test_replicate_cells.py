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
STORED = ROOT / "reports" / "field" / "results.parquet"


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
    one = a[a["cell"] == a.loc[a["kind"] == "cell", "cell"].iloc[0]]  # a stored table's first cell
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


def _ran_in(tmp_path, frame, cell, **changes) -> Path:
    """A suite's run folder in which ``cell`` already re-ran (its config changed by ``changes``: execution fields
    keep its id), as the runner leaves it: DONE and rows.parquet."""
    from grpo_bench.suite.rows import write_cell_rows
    from grpo_bench.suite.run_folder import mark_done

    info = replicate_cells._record(frame, cell)
    meta = {"id": cell, "suite": "s", "labels": {"seed": 7}, "group": "flow_grpo",
            "config": {**info["config"], **changes}}
    out = tmp_path / "runs" / cell
    assert run_cell(meta, str(out), FAKE, emit=lambda _: None).status == "done"
    write_cell_rows(out, meta)
    mark_done(out)
    return tmp_path / "runs"


def test_a_cell_that_already_re_ran_in_a_run_folder_is_compared_without_running(tmp_path, stored):
    frame, cell = stored
    folder = _ran_in(tmp_path, frame, cell)
    rec = replicate_cells.already_ran(frame, cell, folder)
    assert rec["identical"] and rec["values_compared"] > 0 and "not_compared" not in rec
    tampered = frame.copy()
    at = tampered.index[(tampered["kind"] == "update") & (tampered["metric"] == "kl")][2]
    tampered.loc[at, "value"] *= 2
    rec = replicate_cells.already_ran(tampered, cell, folder)
    assert not rec["identical"] and list(rec["differing_metrics"]) == ["kl"]


def _as_eval_counter(frame, scale: float = 1.0):
    """``frame`` with its ``kl`` values standing in for an eval pass counter (the fake trainer counts none)."""
    out = frame.copy()
    at = out["metric"] == "kl"
    out.loc[at, "metric"] = "compute_eval"
    out.loc[at, "value"] *= scale
    return out


def test_another_eval_schedule_leaves_only_the_eval_counter_uncompared(tmp_path, stored):
    from grpo_bench.suite.results import write_table

    frame, cell = stored
    stored_counter = _as_eval_counter(frame)
    for name, changes in (("other", {"eval_at": [2]}), ("same", {})):
        folder = _ran_in(tmp_path / name, frame, cell, **changes)
        rows = folder / cell / "rows.parquet"
        write_table(rows, _as_eval_counter(load_results(rows), scale=2.0))  # more evals: a larger counter
        rec = replicate_cells.already_ran(stored_counter, cell, folder)
        if changes:
            (why,) = rec["not_compared"].values()
            assert list(rec["not_compared"]) == ["compute_eval"] and why.count("'eval_at': [") == 2 and "[2]" in why
            assert rec["identical"]
        else:  # the same schedule: the counter is compared like any value
            assert "not_compared" not in rec and list(rec["differing_metrics"]) == ["compute_eval"]


def test_a_run_folder_is_read_only_at_finished_cells_inside_it(tmp_path, stored, capsys):
    frame, cell = stored
    with pytest.raises(replicate_cells.UserError, match="not a cell id"):
        replicate_cells.already_ran(frame, "../" + cell[:9], tmp_path)
    with pytest.raises(replicate_cells.UserError, match="not a finished cell"):
        replicate_cells.already_ran(frame, cell, tmp_path)
    folder = _ran_in(tmp_path, frame, cell)
    (folder / cell / "DONE").unlink()
    out = tmp_path / "rec.json"
    frame.to_parquet(tmp_path / "stored.parquet")
    assert replicate_cells.main([str(tmp_path / "stored.parquet"), "--cells", cell, "--ran-in", str(folder),
                                 "--out", str(out)]) == 2
    assert "not a finished cell" in capsys.readouterr().err and not out.exists()
