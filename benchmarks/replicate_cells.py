"""Replicate stored cells on this checkout: re-run a cell of a stored results table from its recorded config and
compare, value by value, what it measures now with what was stored.

A table that restores cells run at an earlier commit (a row whose recipe did not change, kept across a release) is
one behaviour only if this checkout would have produced the same numbers. A fingerprint (behaviour_fingerprint.py)
says so for the tiny test model; a replication says it for the cell itself, on the world it ran on:

    python benchmarks/replicate_cells.py reports/field --one-per-row-and-commit --seeds 1000 1001 1002 \
        --out reports/field_blocks/replication.json

replicates, for every (row, commit) pair of the table (restricted to those seeds), its lowest-seed cell (the
first id among equals) and writes one record a cell: the stored and the replicating commit, the CPU, how many
values were compared, whether all are identical, the largest difference and the metrics that differ. A run is
deterministic on one CPU at one thread (the suite's workers run one thread a cell on a 2-core machine), so a row
that reproduces one cell bit for bit at a commit reproduces its other seeds there: the other cells of that
(row, commit) pair are the same code on other seeds. Compared: every per-update, gradient, final and per-video
value both sides measured; timings (``time_*``, ``*_seconds``, ``*wall*``) are left out, and a metric only one
side records (an observational key added or removed between the commits) is listed, not compared. The record
is rewritten atomically after each cell, so a killed replication keeps what it finished.

A suite that re-runs a stored cell at a clean commit (a dirty-tree cell moved aside, a cell re-run for an eval
point it lacked: an eval leaves the trajectory bit-identical) has already made the replication; ``--ran-in``
compares the stored cells with those finished runs of a run folder instead of running them a second time:

    python benchmarks/replicate_cells.py reports/field --cells 5f90b20cc6c3 --ran-in runs/field \
        --out reports/field_blocks/replication.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from grpo_bench.atomic import atomic_write_json
from grpo_bench.errors import UserError
from grpo_bench.suite.restore import _cell_record
from grpo_bench.suite.results import load_results

COMPARED = ("update", "grad", "final", "video")
"""Row kinds whose values a replication compares (strips are drawn from the videos; the cell row is provenance)."""


def _timing(metric: str) -> bool:
    return metric.startswith("time_") or metric.endswith("_seconds") or "wall" in metric


def values(frame: Any) -> dict[tuple, float]:
    """The compared values of one cell's rows, keyed by (kind, update, metric, prompt, sample, index)."""
    import pandas as pd

    out: dict[tuple, float] = {}
    for row in frame[frame["kind"].isin(COMPARED)].itertuples():
        metric = str(row.metric)
        if _timing(metric):
            continue
        update = None if pd.isna(row.update) else int(row.update)
        prompt = None if pd.isna(row.prompt) else str(row.prompt)
        sample = None if pd.isna(row.sample) else int(row.sample)
        key = (str(row.kind), update, metric, prompt, sample)
        if row.kind == "grad" and row.array is not None:
            for i, x in enumerate(row.array):
                out[(*key, i)] = float(x)
        else:
            out[(*key, 0)] = float(row.value)
    return out


def compare(stored: dict[tuple, float], fresh: dict[tuple, float]) -> dict[str, Any]:
    """Identical means every value both sides hold is equal (NaN equals NaN); the metrics only one side holds are
    listed by name."""
    shared = sorted(set(stored) & set(fresh), key=str)
    differing: dict[str, float] = {}
    for key in shared:
        a, b = stored[key], fresh[key]
        if (math.isnan(a) and math.isnan(b)) or a == b:
            continue
        gap = abs(a - b) if not (math.isnan(a) or math.isnan(b)) else math.inf
        differing[key[2]] = max(differing.get(key[2], 0.0), gap)
    names = lambda keys: sorted({k[2] for k in keys})  # noqa: E731
    return {"values_compared": len(shared), "identical": not differing and bool(shared),
            "max_abs_diff": max(differing.values(), default=0.0),
            "differing_metrics": dict(sorted(differing.items(), key=lambda kv: -kv[1])[:8]),
            "only_stored": names(set(stored) - set(fresh)), "only_replicated": names(set(fresh) - set(stored))}


def _record(frame: Any, cell: str) -> dict[str, Any]:
    row = frame[(frame["cell"] == cell) & (frame["kind"] == "cell")]
    if row.empty:
        raise UserError(f"cell {cell}: no cell record in the stored table")
    info = _cell_record(row["text"].iloc[0], cell, "")  # the restore path's check of a stored record
    if not info.get("config"):
        raise UserError(f"cell {cell}: its record has no config")
    return info


def choose(frame: Any, seeds: list[int] | None) -> list[str]:
    """The lowest-seed cell (first id among equals) of every (row, commit) pair, within ``seeds`` when given."""
    cells = frame[frame["kind"] == "cell"].drop_duplicates("cell")
    best: dict[tuple[str, str], tuple[int, str]] = {}
    for row in cells.itertuples():
        info = json.loads(row.text)
        seed = int(info["config"].get("seed", row.seed))
        if seeds and seed not in seeds:
            continue
        pair = (str(row.group), str(info.get("git_commit", "?")))
        best[pair] = min(best.get(pair, (seed, str(row.cell))), (seed, str(row.cell)))
    return [cell for _, cell in sorted(best.values(), key=lambda sc: (sc[1]))]


def replicate(frame: Any, cell: str, scratch: Path, trainer: str | None = None) -> dict[str, Any]:
    """Re-run ``cell`` from its stored config in ``scratch`` (with the suite's trainer unless another import path
    is given) and compare it with its stored rows."""
    import torch

    from grpo_bench.suite.cell import run_cell
    from grpo_bench.suite.machine import host
    from grpo_bench.suite.rows import cell_rows
    from grpo_bench.suite.runner import TRAINER
    from grpo_bench.train.export import provenance

    info = _record(frame, cell)
    stored = frame[frame["cell"] == cell]
    torch.set_num_threads(int(info.get("threads") or 1))
    meta = {"id": cell, "suite": str(stored["suite"].iloc[0]), "labels": info.get("labels", {}),
            "group": str(stored["group"].iloc[0]), "config": info["config"]}
    out = scratch / cell
    outcome = run_cell(meta, str(out), trainer or TRAINER, emit=lambda _: None)
    result = _result(frame, cell, {"git_commit": provenance().get("git_commit"), "machine": host(),
                                   "threads": torch.get_num_threads(), "status": outcome.status})
    if outcome.status != "done":
        return {**result, "identical": False, "error": outcome.error}
    return {**result, **compare(values(stored), values(cell_rows(out, meta)))}


CELL_ID = re.compile(r"[0-9a-f]{12}")


def already_ran(frame: Any, cell: str, folder: Path) -> dict[str, Any]:
    """Compare ``cell``'s stored rows with a finished run of it in a suite's run folder (``folder/<cell>``: DONE
    and the runner's rows.parquet), without running it again."""
    if not CELL_ID.fullmatch(cell):  # a stored id never names a path outside the folder
        raise UserError(f"cell {cell!r}: not a cell id (12 hex digits)")
    ran = folder / cell
    if not (ran / "DONE").is_file() or not (ran / "rows.parquet").is_file():
        raise UserError(f"{ran}: not a finished cell (its DONE and rows.parquet)")
    fresh = load_results(ran / "rows.parquet")
    if set(fresh["cell"].dropna().astype(str)) != {cell}:
        raise UserError(f"{ran / 'rows.parquet'}: holds rows of other cells than {cell}")
    old, new = _record(frame, cell), _record(fresh, cell)
    if _identity(new) != cell or _identity(old) != cell:
        raise UserError(f"{ran}: its config or the stored one does not key to {cell}")
    result = _result(frame, cell, {k: new.get(k) for k in ("git_commit", "machine", "threads", "status")})
    before, after = values(frame[frame["cell"] == cell]), values(fresh)
    schedule = [{k: info["config"].get(k) for k in EVAL_SCHEDULE} for info in (old, new)]
    if schedule[0] != schedule[1]:  # more or fewer evals: their pass counter differs by design, nothing else may
        before, after = ({k: v for k, v in d.items() if k[2] != "compute_eval"} for d in (before, after))
        result["not_compared"] = {"compute_eval": f"eval schedule {schedule[0]} vs {schedule[1]}"}
    return {**result, **compare(before, after)}


EVAL_SCHEDULE = ("eval_at", "eval_every", "eval_samples")
"""Execution fields (blind to the cell id) that set how often and how much a run evaluates."""


def _identity(info: dict[str, Any]) -> str:
    """The id a cell record's config keys to (execution fields such as eval_at are blind to it)."""
    from grpo_bench.config.identity import cell_id
    from grpo_bench.config.run import from_dict

    return cell_id(from_dict(info["config"]))


def _result(frame: Any, cell: str, replicated: dict[str, Any]) -> dict[str, Any]:
    """The record's provenance: the stored cell's commit and machine beside the replicating run's."""
    info = _record(frame, cell)
    group = str(frame.loc[frame["cell"] == cell, "group"].iloc[0])
    return {"cell": cell, "group": group, "seed": info["config"].get("seed"),
            "stored_commit": info.get("git_commit"), "stored_machine": info.get("machine"),
            "replicated_commit": replicated.get("git_commit"), "replicated_machine": replicated.get("machine"),
            "threads": replicated.get("threads"), "status": replicated.get("status")}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stored", type=Path, help="a stored results table (or its folder)")
    ap.add_argument("--cells", nargs="*", default=[], help="cell ids to replicate")
    ap.add_argument("--one-per-row-and-commit", action="store_true",
                    help="replicate the lowest-seed cell of every (row, commit) pair")
    ap.add_argument("--seeds", type=int, nargs="*", default=None, help="only cells of these seeds")
    ap.add_argument("--out", type=Path, required=True, help="the JSON record (kept and extended when it exists)")
    ap.add_argument("--ran-in", type=Path, default=None,
                    help="a suite's run folder where these cells already re-ran: compare those runs, run nothing")
    args = ap.parse_args(argv)
    try:
        frame = load_results(args.stored)
        cells = list(args.cells) + (choose(frame, args.seeds) if args.one_per_row_and_commit else [])
        known = set(frame["cell"].dropna().astype(str))
        if not cells or not set(cells) <= known:
            raise UserError(f"{args.stored}: no such cells: {sorted(set(cells) - known) or 'none chosen'}")
        done = json.loads(args.out.read_text()) if args.out.is_file() else []
        if not isinstance(done, list) or not all(isinstance(r, dict) and "cell" in r for r in done):
            raise UserError(f"{args.out}: not a list of replication records")
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    have = {r["cell"] for r in done}
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cells:
            if cell in have:
                continue
            try:
                rec = already_ran(frame, cell, args.ran_in) if args.ran_in else replicate(frame, cell, Path(tmp))
            except UserError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            done.append(rec)
            atomic_write_json(args.out, done)
            print(f"{cell} {rec['group']} seed {rec['seed']} ({str(rec['stored_commit'])[:12]}): "
                  f"{'identical' if rec['identical'] else 'DIFFERENT'} over {rec.get('values_compared', 0)} values, "
                  f"max |diff| {rec.get('max_abs_diff', '-')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
