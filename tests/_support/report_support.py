"""Test support for report parts: synthetic results.parquet frames with known held-out oracle learning and
training compute (no trainer runs), shared by the equal-compute and rank tests."""

from __future__ import annotations

import json

import pandas as pd

from grpo_bench.suite.results import COLUMNS

SEEDS = [0, 1, 2, 3]
EVALS = (0, 5, 10)  # eval points (updates); compute is logged on every update line


def eval_results(rows: dict[str, dict], seeds: list[int] = SEEDS) -> pd.DataFrame:
    """group -> {method, per_update: training passes of one update, learning: {eval point: per-seed learning},
    setting (optional, default "A"): the row's family label, e.g. "A, reward=world_oracle" as strata make it}.

    Setting A weighs the oracle dimensions 1 : 1 : 1, so each dimension carries a third of the learning (the
    setting label's part before its first comma picks the weights); a NaN learning is a missing eval."""
    out = [{"suite": "synthetic", "kind": "suite", "text": json.dumps({"name": "synthetic", "report": {}})}]
    for group, spec in rows.items():
        setting = spec.get("setting", "A")
        cfg = {"setting": "A", "reward": "world_judge", "method": spec["method"]}
        for i, seed in enumerate(seeds):
            cell = f"{group}-{setting}-{seed}"
            base = {"suite": "synthetic", "cell": cell, "group": group, "setting": setting, "seed": seed,
                    "method": spec["method"], "kl": "none", "equalizer": False}
            out.append({**base, "kind": "cell", "metric": "wall_time", "value": 1.0,
                        "text": json.dumps({"labels": {}, "config": {**cfg, "seed": seed}, "status": "done"})})
            for u in range(10):
                out.append({**base, "kind": "update", "update": u, "metric": "compute_training",
                            "value": float(spec["per_update"] * (u + 1))})
                if "reference" in spec:  # the KL reference's passes of one update (a part of per_update)
                    out.append({**base, "kind": "update", "update": u, "metric": "compute_reference",
                                "value": float(spec["reference"] * (u + 1))})
            for point in EVALS:
                learned = 0.0 if point == 0 else spec["learning"][point][i]
                line = min(point, 9)  # the final eval (after update 10) sits on update 9's line
                for dim in ("vq", "mq", "ta"):
                    out.append({**base, "kind": "update", "update": line, "metric": f"eval_oracle_{dim}",
                                "value": 0.5 + learned / 3})
                out.append({**base, "kind": "update", "update": line, "metric": "eval_at", "value": float(point)})
    frame = pd.DataFrame(out, columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})
