"""The tracked tree stays under its ceiling (a bare GPU machine receives it by copy, 64 MiB with its wheelhouse), and
the compact encodings keep what a reader sees (grpo_bench/report/compact.py, benchmarks/compact_reports.py)."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

from grpo_bench.errors import UserError
from grpo_bench.report.compact import TREE_LIMIT_BYTES, compact_folder, png_bytes, reencode_parquet
from grpo_bench.suite.results import COLUMNS, read_table, write_table

ROOT = Path(__file__).resolve().parents[2]


def test_tracked_tree_under_limit():
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = [ROOT / n for n in names.decode().split("\0") if n]
    sizes = {f: f.stat().st_size for f in files if f.is_file()}
    total = sum(sizes.values())
    biggest = sorted(sizes.items(), key=lambda x: -x[1])[:3]
    largest = ", ".join(f"{f.relative_to(ROOT)} {s / 1e6:.1f} MB" for f, s in biggest)
    assert total <= TREE_LIMIT_BYTES, (
        f"tracked files are {total / 1e6:.1f} MB, over {TREE_LIMIT_BYTES / 1e6:.0f} MB (largest: {largest}); "
        "run python benchmarks/compact_reports.py reports")


def _results_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 40
    frame = pd.DataFrame({
        "suite": ["s"] * n, "cell": [f"c{i % 3}" for i in range(n)], "group": ["g"] * n, "setting": ["A"] * n,
        "method": ["flow_grpo"] * n, "kl": ["dual"] * n, "equalizer": [True] * n, "seed": range(n),
        "kind": ["update"] * (n - 2) + ["grad", "strip"], "update": [*range(n - 1), None],
        "metric": ["reward"] * n, "value": [*rng.normal(size=n - 1), np.nan], "prompt": [None] * n,
        "sample": [None] * n, "video_seed": [None] * n,
        "array": [None] * (n - 2) + [np.array([0.5, np.nan, 2.0]), None],
        "shape": [None] * (n - 1) + [np.array([1, 4, 8, 8, 3])], "text": [None] * (n - 1) + ["aGVsbG8="],
    })
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def _codecs(path: Path) -> set[str]:
    meta = pq.ParquetFile(path).metadata
    return {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)}


def test_results_writer_uses_zstd(tmp_path):
    frame = _results_frame()
    write_table(tmp_path / "results.parquet", frame)
    assert _codecs(tmp_path / "results.parquet") == {"ZSTD"}
    pd.testing.assert_frame_equal(read_table(tmp_path / "results.parquet"), frame)


def test_reencoded_table_reads_back_equal(tmp_path):
    frame = _results_frame()
    path = tmp_path / "results.parquet"
    frame.to_parquet(path, index=False)  # the older snappy encoding
    reencode_parquet(path)
    assert _codecs(path) == {"ZSTD"}
    pd.testing.assert_frame_equal(read_table(path), frame, check_exact=True)


def test_stored_results_reencode_equal(tmp_path):
    """A table stored under reports/ (every kind of row a suite writes) reads back equal after re-encoding."""
    stored = ROOT / "reports" / "kl_weight" / "results.parquet"
    copy = tmp_path / "results.parquet"
    shutil.copy(stored, copy)
    reencode_parquet(copy)
    pd.testing.assert_frame_equal(read_table(copy), read_table(stored), check_exact=True)


def test_unreadable_parquet_is_one_line_and_left_alone(tmp_path):
    path = tmp_path / "results.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(UserError, match="results.parquet: not a readable parquet file"):
        reencode_parquet(path)
    assert path.read_bytes() == b"PAR1 not really"


def test_palette_png_keeps_a_plots_pixels():
    """A figure of 12 flat colours (a plot's lines, text and background) comes back pixel for pixel."""
    rng = np.random.default_rng(1)
    colours = rng.integers(0, 256, size=(12, 3), dtype=np.uint8)
    pixels = colours[rng.integers(0, 12, size=(60, 90))]
    rgba = np.concatenate([pixels, np.full((60, 90, 1), 255, np.uint8)], axis=-1)
    raw = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(raw, "PNG")
    out = Image.open(io.BytesIO(png_bytes(raw.getvalue())))
    assert out.mode == "P"
    assert np.array_equal(np.asarray(out.convert("RGB")), pixels)


def test_compact_folder_shrinks_and_is_idempotent(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot(np.arange(50), np.sin(np.arange(50) / 5))
    ax.fill_between(np.arange(50), -1, 1, alpha=0.2)
    fig.savefig(tmp_path / "curve.png", dpi=110)
    plt.close(fig)
    _results_frame().to_parquet(tmp_path / "results.parquet", index=False)
    done = compact_folder(tmp_path)
    assert done[".png"].files == 1 and done[".png"].after < done[".png"].before
    assert done[".parquet"].files == 1
    again = compact_folder(tmp_path)
    assert again[".png"].after == done[".png"].after  # an already compact image is left as it is
    with pytest.raises(UserError, match="not a folder"):
        compact_folder(tmp_path / "missing")
