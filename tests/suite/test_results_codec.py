"""The compact on-disk layout of results tables (grpo_bench/suite/results_codec.py): every reader gets back the
frame that was written, old long files still read, and a damaged compact file is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpo_bench.errors import UserError
from grpo_bench.suite.results import COLUMNS, load_results, read_table, write_table
from grpo_bench.suite.results_codec import LAYOUT_KEY, LAYOUT_RUNS, RUN_METRICS, VALUE_PREFIX

ROOT = Path(__file__).resolve().parents[2]
STORED = sorted(p for p in (ROOT / "reports").rglob("*.parquet"))


def _row(**values) -> dict:
    return {"suite": "s", "cell": "c", "group": "g", "setting": "A", "method": "flow_grpo", "kl": "fixed",
            "equalizer": False, "seed": 0, **values}


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def _hand_built() -> pd.DataFrame:
    """Runs the layout must find (and must not): update 0's three metrics split by a grad row, update 1 with a
    metric logged twice, a NaN and a null metric, a video's metrics, a strip and a cell row."""
    return _frame([
        _row(kind="update", update=0, metric="reward", value=0.5),
        _row(kind="update", update=0, metric="kl", value=1e-300),
        _row(kind="grad", update=0, metric="grad_norm_per_step", array=np.array([0.5, np.nan])),
        _row(kind="update", update=0, metric="loss", value=-0.0),
        _row(kind="update", update=0, metric="lr", value=3e-4),
        _row(kind="update", update=1, metric="reward", value=np.nan),
        _row(kind="update", update=1, metric="kl", value=2.0),
        _row(kind="update", update=1, metric="reward", value=0.25),  # a repeat starts a new run
        _row(kind="update", update=1, metric=None, value=7.0),  # no metric: stored as it is
        _row(kind="video", metric="oracle_ta", value=0.1, prompt="p", sample=0, video_seed=11),
        _row(kind="video", metric="oracle_vq", value=0.2, prompt="p", sample=0, video_seed=11),
        _row(kind="video", metric="oracle_ta", value=0.3, prompt="p", sample=1, video_seed=12),
        _row(kind="strip", prompt="p", sample=0, shape=np.array([1, 4, 8, 8, 3]), text="aGVsbG8="),
        _row(kind="cell", metric="wall_time", value=12.5, text='{"status": "done"}'),
    ])


def _stored_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def test_hand_built_runs_are_stored_as_one_row_each_and_read_back_exactly(tmp_path):
    frame = _hand_built()
    path = tmp_path / "results.parquet"
    write_table(path, frame)
    assert pq.read_schema(path).metadata[LAYOUT_KEY] == LAYOUT_RUNS
    # runs: (reward, kl), (loss, lr), (reward, kl) of update 1, the first video's two metrics -> 4 rows saved
    assert _stored_rows(path) == len(frame) - 4
    raw = pd.read_parquet(path)
    assert sorted(json.loads(t) for t in raw[RUN_METRICS].dropna()) == [
        ["loss", "lr"], ["oracle_ta", "oracle_vq"], ["reward", "kl"], ["reward", "kl"]]
    back = read_table(path)
    pd.testing.assert_frame_equal(back, frame, check_exact=True)
    assert np.signbit(back.loc[3, "value"]) and back.loc[1, "value"] == 1e-300  # -0.0 and a subnormal kept


def test_a_real_cell_round_trips(tmp_path):
    """Every kind of row a suite writes (update, final, video, grad, strip, cell), from a stored table."""
    frame = read_table(ROOT / "reports" / "ablate_kl" / "results.parquet")
    cell = frame.loc[frame["kind"] == "grad", "cell"].iloc[0]
    part = frame[frame["cell"] == cell].reset_index(drop=True)
    assert {"update", "final", "video", "grad", "strip", "cell"} <= set(part["kind"])
    path = tmp_path / "rows.parquet"
    write_table(path, part)
    assert _stored_rows(path) < len(part) / 5
    pd.testing.assert_frame_equal(read_table(path), part, check_exact=True)
    columns = ["kind", "metric", "value", "text"]
    pd.testing.assert_frame_equal(read_table(path, columns), part[columns], check_exact=True)


def test_a_long_file_written_before_the_layout_still_reads(tmp_path):
    frame = _hand_built()
    path = tmp_path / "results.parquet"
    frame.to_parquet(path, index=False)
    assert LAYOUT_KEY not in (pq.read_schema(path).metadata or {})
    pd.testing.assert_frame_equal(read_table(path), frame, check_exact=True)
    pd.testing.assert_frame_equal(load_results(path), frame, check_exact=True)


def test_a_frame_the_layout_cannot_hold_is_stored_long(tmp_path):
    frame = _hand_built()
    frame[VALUE_PREFIX + "reward"] = 1.0  # a column named like the layout's own
    path = tmp_path / "results.parquet"
    write_table(path, frame)
    assert LAYOUT_KEY not in (pq.read_schema(path).metadata or {}) and _stored_rows(path) == len(frame)
    pd.testing.assert_frame_equal(read_table(path), frame, check_exact=True)


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(ROOT / "reports")))
def test_stored_tables_are_in_the_compact_layout(path):
    """Every results table under reports/ is stored compactly (benchmarks/compact_reports.py reports)."""
    assert pq.read_schema(path).metadata.get(LAYOUT_KEY) == LAYOUT_RUNS
    assert _stored_rows(path) < len(read_table(path, ["kind"])) / 5


def _damaged(tmp_path: Path, run_metrics: str | None = None, layout: bytes = LAYOUT_RUNS, wide: str | None = None):
    path = tmp_path / "results.parquet"
    write_table(path, _hand_built())
    table = pq.read_table(path)
    if run_metrics is not None:
        i = table.schema.get_field_index(RUN_METRICS)
        column = [run_metrics if v is not None else None for v in table[RUN_METRICS].to_pylist()]
        table = table.set_column(i, RUN_METRICS, pa.array(column, pa.string()))
    if wide is not None:
        i = table.schema.get_field_index(VALUE_PREFIX + "kl")
        table = table.set_column(i, VALUE_PREFIX + "kl", pa.array([wide] * len(table), pa.string()))
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, LAYOUT_KEY: layout}), path)
    return path


@pytest.mark.parametrize("damage, needle", [
    ({"run_metrics": '["reward", "nowhere"]'}, "is not a list of distinct metrics with their value:<metric>"),
    ({"run_metrics": '["reward", "reward"]'}, "is not a list of distinct metrics"),
    ({"run_metrics": "{broken"}, "'{broken' is not a list of distinct metrics"),
    ({"wide": "high"}, "column 'value:kl' is not float64"),
    ({"layout": b"runs/9"}, "stored in layout 'runs/9', which this grpo-bench does not know"),
])
def test_a_damaged_compact_file_is_one_line(tmp_path, damage, needle):
    path = _damaged(tmp_path, **damage)
    with pytest.raises(UserError, match=None) as info:
        load_results(path)
    assert needle in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_compacting_a_long_file_stores_it_in_the_layout(tmp_path):
    """benchmarks/compact_reports.py on a table written before the layout: compact, and the same frame."""
    from grpo_bench.report.compact import reencode_parquet

    frame = _hand_built()
    path = tmp_path / "results.parquet"
    frame.to_parquet(path, index=False)
    reencode_parquet(path)
    assert pq.read_schema(path).metadata[LAYOUT_KEY] == LAYOUT_RUNS and _stored_rows(path) == len(frame) - 4
    pd.testing.assert_frame_equal(read_table(path), frame, check_exact=True)
