"""How far apart two machines put the same cells: a stored table's cells re-run, unchanged, on another kind of CPU.

    python benchmarks/hardware_redraw.py reports/field_image runs/field_image [--json out.json]
    python benchmarks/hardware_redraw.py reports/field_image reports/field_image_blocks/xeon_redraw.parquet
    python benchmarks/hardware_redraw.py reports/field_image reports/field_image_blocks/epyc_avx2_redraw.parquet

Each argument is a suite folder, a stored report or a results table itself (the stored re-draw keeps only what
this reads: the cells, their evals and finals).

Both folders hold results tables of one suite at one commit (the same cell ids), run on two CPUs whose float
kernels differ (an AMD EPYC with AVX512-BF16, an Intel Xeon with AMX, an AMD EPYC with AVX2 only: their behaviour
fingerprints differ, docs/statistics.md). Each cell's headline, held-out oracle learning (the last eval minus update 0,
report/data.py ``learning``), is paired across the two by cell id, and printed:

* per world (a model / reward track, report/transfer.py): the correlation of the paired learnings, the standard
  deviation of their difference over sqrt(2) (the spread one machine adds to a cell: 0 where the cells reproduce),
  beside the spread of learning between the seeds of a method on either machine (the residual of a
  method-plus-seed fit, the noise a comparison of methods sees);
* the update-0 evals, which sample the shipped base model with no training: their largest difference between the
  machines (the float kernels' own size, before any update compounds it);
* each machine's rank agreement over its seeds (Kendall's W, Friedman's p) and Kendall's tau between the two
  machines' orders of the methods, per seed and of the mean ranks over the seeds (the order a table reports).

If the spread a machine adds is about the seeds' own, a cell re-run on the other CPU is another draw, as a new seed
is, and two machines' cells cannot be paired as one behaviour; if it is far smaller, they nearly reproduce.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau, pearsonr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_bench.report import data  # noqa: E402
from grpo_bench.report.transfer import METRIC, consistency, seed_ranks, world_scores  # noqa: E402
from grpo_bench.suite.results import read_table  # noqa: E402


def table(where: Path) -> pd.DataFrame:
    path = Path(where) if Path(where).is_file() else Path(where) / "results.parquet"
    if not path.is_file():
        raise SystemExit(f"{path}: no results table (give a suite folder or a stored report)")
    return read_table(path)


def learning(df: pd.DataFrame) -> pd.DataFrame:
    """[cell, world, method, seed, learning]: each finished cell's held-out oracle learning (the last eval minus
    update 0) on the world (model / reward track) and under the method ``world_scores`` reads it as."""
    learned = data.learning(df)
    gain = dict(zip(learned["cell"], learned[METRIC].astype(float)))
    scores = world_scores(df)
    return scores.assign(learning=scores["cell"].map(gain))[["cell", "world", "method", "seed", "learning"]]


def residual_sd(cells: pd.DataFrame) -> float:
    """The spread of learning around a method-plus-seed fit (two-way, no interaction): the noise a paired
    comparison of two methods over the same seeds sees, per cell."""
    wide = cells.pivot_table(index="seed", columns="method", values="learning", aggfunc="first").dropna()
    if wide.shape[0] < 2 or wide.shape[1] < 2:
        return math.nan
    values = wide.to_numpy(float)
    fit = values.mean(1, keepdims=True) + values.mean(0, keepdims=True) - values.mean()
    return float(np.sqrt(((values - fit) ** 2).sum() / ((values.shape[0] - 1) * (values.shape[1] - 1))))


def update0_gap(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """The largest difference between the machines of a cell's held-out oracle eval at update 0: the base model
    sampled alike on both, so only the float kernels differ."""
    starts = []
    for df in (a, b):
        curves = data.eval_curves(df)
        starts.append(curves[curves["update"] == 0].set_index("cell")[METRIC])
    both = pd.concat(starts, axis=1, join="inner").dropna()
    return float((both.iloc[:, 0] - both.iloc[:, 1]).abs().max()) if len(both) else math.nan


def _tau(a: pd.Series, b: pd.Series) -> dict[str, float]:
    got = kendalltau(a, b)
    return {"tau": float(got.statistic), "p": float(got.pvalue)}


def compare(a: pd.DataFrame, b: pd.DataFrame) -> dict:
    la, lb = learning(a), learning(b)
    paired = la.merge(lb[["cell", "learning"]], on="cell", suffixes=("_a", "_b")).dropna()
    ranks_a, ranks_b = seed_ranks(world_scores(a)), seed_ranks(world_scores(b))
    out: dict = {"cells_paired": len(paired), "update0_largest_gap": update0_gap(a, b), "worlds": {}}
    for world, part in paired.groupby("world", sort=False):
        diff = part["learning_a"] - part["learning_b"]
        ra, rb = ranks_a.get(world), ranks_b.get(world)
        seeds = sorted(set(ra.index) & set(rb.index)) if ra is not None and rb is not None else []
        if seeds:  # a partial re-draw (a stopped run): both orders over the methods both machines ran (tau and
            common = [m for m in ra.columns if m in rb.columns]  # W read orders, not the rank values)
            ra, rb = ra[common], rb[common]
        out["worlds"][world] = {
            "cells": len(part),
            "correlation": float(pearsonr(part["learning_a"], part["learning_b"]).statistic) if len(part) > 2
            else math.nan,
            "machine_sd": float(diff.std(ddof=1) / math.sqrt(2)),
            "seed_sd": [residual_sd(la[la["world"] == world]), residual_sd(lb[lb["world"] == world])],
            "mean_learning": [float(part["learning_a"].mean()), float(part["learning_b"].mean())],
            "agreement": [consistency(r) if r is not None else {} for r in (ra, rb)],
            "methods": int(ra.shape[1]) if seeds else 0,
            "tau_by_seed": {int(s): float(kendalltau(ra.loc[s], rb.loc[s]).statistic) for s in seeds},
            "tau_mean_ranks": _tau(ra.mean(), rb.mean()) if seeds else {},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    got = compare(table(args.first), table(args.second))
    print(f"{got['cells_paired']} cells paired; update-0 held-out evals differ by at most "
          f"{got['update0_largest_gap']:.2e}")
    for world, f in got["worlds"].items():
        agree = " / ".join(f"W {x.get('w', math.nan):.2f} (p {x.get('p', math.nan):.3f})" for x in f["agreement"])
        print(f"{world}: {f['cells']} cells, {f['methods']} methods ranked; learning correlation across machines "
              f"{f['correlation']:+.2f}; "
              f"machine sd {f['machine_sd']:.3f} against the seeds' residual sd {f['seed_sd'][0]:.3f} / "
              f"{f['seed_sd'][1]:.3f}; mean learning {f['mean_learning'][0]:+.3f} / {f['mean_learning'][1]:+.3f}")
        print(f"  agreement over seeds: {agree}; tau between the machines' orders by seed: "
              + ", ".join(f"{s} {t:+.2f}" for s, t in f["tau_by_seed"].items())
              + f"; of their mean ranks {f['tau_mean_ranks']['tau']:+.2f} (p {f['tau_mean_ranks']['p']:.3f})")
    if args.json is not None:
        args.json.write_text(json.dumps(got, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()
