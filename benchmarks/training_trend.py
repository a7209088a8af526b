"""Does RL raise a cell's training reward? Its trend over the run, with the drawn prompts' difficulty held fixed.

    python benchmarks/training_trend.py runs/pilot_image                # every finished cell, then per row
    python benchmarks/training_trend.py runs/pilot_image --strata prompt
    python benchmarks/training_trend.py runs/pilot_image --until 60   # what the first 60 updates showed

A development reading (training reward only; it never reads the held-out eval). On a prompt set whose prompts differ
widely in difficulty (the image world: a single object scores about 2.6 of 3, a relation about 1.9), which prompts an
update draws moves its logged reward more than learning does, so "last 10 minus first 10 updates" is mostly the
draw. Each update's prompts are known (the trainer's 'prompts' stream, ``train.collect.drawn_prompts``), so the
reward is regressed on the update index with the share of each prompt stratum as covariates:

    reward_u = a + b * u + sum_k c_k * share_k(u) + e_u,    trend = b * (last update)

``--strata kind`` (the default) is the image world grammar's kind (one object, a count of 2-4, a relation; one
stratum on other worlds); ``prompt`` gives every prompt its own effect (for small prompt sets); ``none`` fits the
plain line. The interval is OLS's 95% (updates as independent, which autocorrelated rewards make optimistic); the
per-row summary is the mean over seeds with a 95% t-interval over seeds, the interval to read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np


def stratum(prompt: str, strata: str) -> str:
    """The stratum of a prompt under ``strata``."""
    if strata == "none":
        return ""
    if strata == "prompt":
        return prompt
    from grpo_bench.errors import UserError
    from grpo_bench.image_world.grammar import parse

    try:
        scene = parse(prompt)
    except UserError:  # not an image-world prompt: one stratum
        return ""
    return "relation" if scene.is_relation else ("single" if scene.count == 1 else "count")


def trend(updates: np.ndarray, rewards: np.ndarray, labels: list[list[str]]) -> tuple[float, float, float]:
    """(trend over the run, its 95% half-width, residual sd): OLS of reward on update and stratum shares.

    ``labels[i]`` are the strata of the prompts update ``updates[i]`` drew; one stratum is the baseline."""
    kinds = sorted({k for row in labels for k in row})[1:]
    X = np.array([[1.0, float(u)] + [row.count(k) / len(row) for k in kinds] for u, row in zip(updates, labels)])
    y = np.asarray(rewards, dtype=float)
    keep = [0, 1] + [j for j in range(2, X.shape[1]) if X[:, j].std() > 0]
    X = X[:, keep]
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = len(y) - np.linalg.matrix_rank(X)
    if dof <= 0:
        raise ValueError(f"{len(y)} updates cannot fit {X.shape[1]} effects")
    resid = y - X @ beta
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.pinv(X.T @ X)
    span = float(np.max(updates))
    from scipy import stats

    return float(beta[1]) * span, float(stats.t.ppf(0.975, dof) * math.sqrt(cov[1, 1])) * span, math.sqrt(s2)


def cell_trend(cell: Path, strata: str, until: int | None = None) -> dict:
    """One finished cell's trend (its config from cell.json, its updates from its rows); with ``until``, of its
    first ``until`` updates only (what a run of that length would have logged: the draw and the lr schedule do not
    read the run's length)."""
    import pandas as pd

    from grpo_bench.config.prompts import load_prompt_set
    from grpo_bench.config.run import RunConfig
    from grpo_bench.suite.run_folder import CELL, ROWS
    from grpo_bench.train.collect import drawn_prompts

    cfg = RunConfig(**json.loads((cell / CELL).read_text())["config"])
    rows = pd.read_parquet(cell / ROWS)  # the cell's own wide rows: one value column per metric
    rows = rows[(rows["kind"] == "update") & rows["value:reward"].notna()].sort_values("update")
    if until is not None:
        rows = rows[rows["update"] < until]
    train = load_prompt_set(cfg.prompts).train
    ups = rows["update"].to_numpy()
    labels = [[stratum(p, strata) for p in drawn_prompts(train, cfg.seed, int(u), cfg.prompts_per_update)] for u in ups]
    b, half, sd = trend(ups, rows["value:reward"].to_numpy(), labels)
    return {"cell": cell.name, "method": cfg.method, "lr": cfg.lr, "seed": cfg.seed, "prompts": cfg.prompts,
            "model": cfg.model, "reward": cfg.reward,
            "batch": f"{cfg.prompts_per_update}x{cfg.group_size}", "trend": b, "half": half, "resid_sd": sd}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="a suite's run folder (runs/<suite>)")
    ap.add_argument("--strata", choices=("kind", "prompt", "none"), default="kind")
    ap.add_argument("--until", type=int, default=None, metavar="U",
                    help="read each cell's first U updates only (a shorter run's reading)")
    args = ap.parse_args(argv)
    if args.until is not None and args.until < 3:
        print(f"error: --until {args.until}: a trend needs at least 3 updates", file=sys.stderr)
        return 2
    if not args.run_dir.is_dir():
        print(f"error: {args.run_dir}: not a folder", file=sys.stderr)
        return 2
    from grpo_bench.report.stats import mean_ci
    from grpo_bench.suite.run_folder import ROWS, is_done

    cells = [c for c in sorted(args.run_dir.iterdir()) if is_done(c) and (c / ROWS).exists()]
    if not cells:
        print(f"error: {args.run_dir}: no finished cell", file=sys.stderr)
        return 2
    out = []
    for c in cells:
        try:
            out.append(cell_trend(c, args.strata, args.until))
        except ValueError as exc:  # too few updates for the strata's effects
            print(f"error: {c}: {exc}; read more updates or coarser strata (--strata kind or none)",
                  file=sys.stderr)
            return 2
    for r in out:
        print(f"{r['cell']} {r['method']:14s} lr {r['lr']:<7g} seed {r['seed']:<4} batch {r['batch']:5s} "
              f"trend {r['trend']:+.3f} ± {r['half']:.3f} (resid sd {r['resid_sd']:.3f})")
    rows: dict[tuple, list[float]] = {}
    for r in out:
        rows.setdefault((r["method"], r["lr"], r["batch"], r["model"], r["reward"]), []).append(r["trend"])
    print("row (method, lr, batch, model, reward): mean trend over seeds ± 95% t")
    for key, v in sorted(rows.items(), key=str):
        mean, half, n = mean_ci(v)
        print(f"  {key}: {mean:+.3f} ± {half:.3f} ({n} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
