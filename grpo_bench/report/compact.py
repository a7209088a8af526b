"""Compact storage of a reports folder: results tables re-encoded in the compact layout, figures as 256-colour PNGs.

A bare GPU machine receives the repository by copy (64 MiB at most with its wheelhouse), so the tracked
tree stays under ``TREE_LIMIT_BYTES`` (tests/repo/test_repo_size.py) however many result blocks are stored.
Both encodings keep what a reader sees: a re-encoded results table reads back as the same frame (columns,
dtypes, every value, row order; grpo_bench.suite.results_codec; checked before the file is replaced), and a
plot's few flat colours survive a 256-colour palette (matplotlib draws lines, text and translucent bands in far
fewer colours).

    python benchmarks/compact_reports.py reports     # every *.parquet and *.png under reports/
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_bench.atomic import atomic_write
from grpo_bench.errors import UserError

COPY_LIMIT_BYTES = 64 * 1024**2
"""What a device machine receives by copy: the tracked tree and the wheelhouse together."""
WHEELHOUSE_ALLOWANCE_BYTES = 12_000_000
"""Room kept for the wheelhouse (benchmarks/wheelhouse.py): measured at 8.26 MB on 2026-12-06 (11 wheels, 6.36 MB
of them diffusers 0.42.1), so 3.7 MB is left for its growth before the ceiling below has to move."""
TREE_LIMIT_BYTES = COPY_LIMIT_BYTES - WHEELHOUSE_ALLOWANCE_BYTES
"""The tracked tree's ceiling (55.1 MB): whatever the tree holds under it, the measured wheelhouse still fits."""
PALETTE_COLOURS = 256


def png_bytes(image_bytes: bytes) -> bytes:
    """A PNG as an optimised 256-colour palette image on white (a plot's alpha is the figure's background)."""
    from PIL import Image

    image = Image.open(io.BytesIO(image_bytes))
    image.load()
    if image.mode == "P" and "transparency" not in image.info:  # already a palette image: kept byte for byte
        return image_bytes
    if image.mode in ("RGBA", "LA", "P"):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba)
    palette = image.convert("RGB").quantize(PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT,
                                            dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, "PNG", optimize=True)
    return out.getvalue()


def save_figure(fig: Any, path: Path, dpi: int, **savefig: Any) -> None:
    """``fig.savefig`` to ``path`` as a compact PNG (what every report figure goes through)."""
    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi, **savefig)
    data = png_bytes(raw.getvalue())
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def reencode_parquet(path: Path) -> None:
    """Rewrite one results table in the writer's layout and encoding; refuse (UserError) if it would not
    read back as the same frame, leaving the file as it was."""
    import pandas as pd

    from grpo_bench.suite.results_codec import read_frame, write_frame

    try:
        frame = read_frame(path)
    except UserError:
        raise
    except Exception as exc:  # a truncated or foreign file: name it, change nothing
        raise UserError(f"{path}: not a readable parquet file ({str(exc).splitlines()[0][:160]})") from None
    buffer = io.BytesIO()
    write_frame(buffer, frame)
    try:
        pd.testing.assert_frame_equal(read_frame(io.BytesIO(buffer.getvalue())), frame, check_exact=True)
    except AssertionError:
        raise UserError(f"{path}: the re-encoded table does not read back equal; left unchanged") from None
    data = buffer.getvalue()
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


@dataclass
class Compacted:
    files: int
    before: int
    after: int


def compact_folder(folder: Path) -> dict[str, Compacted]:
    """Re-encode every parquet and PNG under ``folder``; bytes before and after per kind."""
    if not folder.is_dir():
        raise UserError(f"{folder}: not a folder (give a reports folder, e.g. reports)")
    encoders = {".parquet": reencode_parquet,
                ".png": lambda p: _rewrite(p, png_bytes(p.read_bytes()))}
    done: dict[str, Compacted] = {}
    for suffix, encode in encoders.items():
        files = sorted(folder.rglob(f"*{suffix}"))
        before = sum(f.stat().st_size for f in files)
        for f in files:
            encode(f)
        done[suffix] = Compacted(len(files), before, sum(f.stat().st_size for f in files))
    return done


def _rewrite(path: Path, data: bytes) -> None:
    if len(data) < path.stat().st_size:
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
