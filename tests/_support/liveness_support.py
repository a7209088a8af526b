"""results.parquet rows of made-up per-update metrics, as the liveness table reads them: shared by the liveness
tests and the logp_gap tests."""

from __future__ import annotations

import json

import pandas as pd

UPDATES = 12


def liveness_results(rows: dict[str, dict]) -> pd.DataFrame:
    """group -> {'kl': variant, 'metrics': {name: [value per update]}} as results.parquet rows (2 seeds)."""
    out = []
    for group, spec in rows.items():
        method = group.split()[0]
        for seed in (0, 1):
            cell = f"{group.replace(' ', '_')}-{seed}"
            cfg = {"method": method, "kl": spec["kl"], "kl_adaptive": True, "kl_beta_min": 1e-3,
                   **spec.get("config", {})}
            out.append({"suite": "t", "cell": cell, "group": group, "setting": "B", "seed": seed, "kind": "cell",
                        "method": method, "kl": spec["kl"], "equalizer": False, "metric": "wall_time", "value": 1.0,
                        "text": json.dumps({"config": cfg, "status": "done"})})
            for name, values in spec["metrics"].items():
                out += [{"suite": "t", "cell": cell, "group": group, "setting": "B", "seed": seed, "kind": "update",
                         "method": method, "kl": spec["kl"], "equalizer": False, "update": u, "metric": name,
                         "value": v} for u, v in enumerate(values)]
    return pd.DataFrame(out)
