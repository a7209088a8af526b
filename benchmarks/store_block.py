"""Store the finished cells of a run folder as one restorable block under reports/ (a long run's progress, kept
as it lands so that a session's end or a new machine loses nothing; `grpo-bench restore BLOCK RUN_DIR` brings it
back).

    python benchmarks/store_block.py runs/field_tune reports/field_blocks/tune_cells.parquet \
        --not-in reports/main_table_tune --strips-seed 100

Cells another stored table already holds (``--not-in``, repeatable) are left out: a block holds each cell once.
Strips (PNG frames of a cell's eval videos) are kept only where a report draws them: a report shows the strips of
each row's lowest seed (report/data.py ``strips``), so ``--strips-seed N`` keeps those of seed N alone (the lowest
seed of the table the block belongs to) and drops the rest, about half a cell's stored bytes. Without it every
strip is kept. The block is written in the results writer's layout (suite/results_codec.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpo_bench.errors import UserError
from grpo_bench.suite.results import COLUMNS, load_results, read_table, write_table
from grpo_bench.suite.run_folder import ROWS, is_done


def finished_rows(run_dir: Path, skip: set[str]):
    """The rows of every finished cell in ``run_dir`` whose id is not in ``skip`` (sorted by id)."""
    import pandas as pd

    parts = [read_table(c / ROWS)[list(COLUMNS)] for c in sorted(run_dir.iterdir())
             if c.is_dir() and c.name not in skip and is_done(c) and (c / ROWS).is_file()]
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True).astype({k: v for k, v in COLUMNS.items() if v != "object"})


def store_block(run_dir: Path, out: Path, not_in: list[Path], strips_seed: int | None):
    """The block's frame, written to ``out``; None (nothing written) when no cell is left to store."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: not a run folder")
    skip: set[str] = set()
    for table in not_in:
        skip |= set(load_results(table)["cell"].dropna().astype(str))
    frame = finished_rows(run_dir, skip)
    if frame is None:
        return None
    if strips_seed is not None:
        frame = frame[(frame["kind"] != "strip") | (frame["seed"] == strips_seed)].reset_index(drop=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_table(out, frame)
    return frame


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--not-in", type=Path, action="append", default=[], help="a stored table (or its folder)")
    ap.add_argument("--strips-seed", type=int, default=None, help="keep the strips of this seed's cells only")
    args = ap.parse_args(argv)
    try:
        frame = store_block(args.run_dir, args.out, args.not_in, args.strips_seed)
    except UserError as exc:
        print(f"store_block: {exc}", file=sys.stderr)
        return 2
    if frame is None:
        print(f"store_block: {args.run_dir}: no finished cell beyond the stored tables; nothing written")
        return 0
    print(f"{args.out}: {frame['cell'].nunique()} cells, {len(frame)} rows, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
