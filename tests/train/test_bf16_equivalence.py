"""bf16 autocast learns what fp32 learns (opt-in: ``pytest -m slow tests/train/test_bf16_equivalence.py``, ~6 min).

The check that made bf16 the world's default (train/precision.py). The main table's reference cell
(SAGE-GRPO, oracle track, Setting A) runs at fp32 and at bf16 for SEEDS seeds, with everything else
shared (prompts, initial noise, SDE noise, eval noise); learning = held-out oracle (setting-weighted)
at the end minus the same at update 0. The per-seed difference d = learning(bf16) - learning(fp32) must
be equivalent to zero by a TOST at 5% (its 90% t interval inside +-MARGIN), where MARGIN is the main
table's equivalence margin for the oracle: bf16 may not move learning by an effect the table is built to
detect. The measured numbers are printed (and, with GRPO_BENCH_BF16_JSON=path, written as JSON).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest
from scipy import stats

from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.train.precision import has_bf16_units
from grpo_bench.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2, 3)
UPDATES = 60
MARGIN = 0.05
"""The main table's equivalence margin on the oracle (suites/main_table.yaml report.equivalence)."""
WEIGHTS = {"A": (1.0, 1.0, 1.0), "B": (0.5, 0.5, 1.0)}

pytestmark = pytest.mark.slow


def _reference_cell(seed: int):
    """The main table's sage_grpo / world_oracle / A cell, at ``seed`` (which the suite may not list)."""
    import dataclasses

    cells = expand(load_suite(ROOT / "suites" / "main_table.yaml"))
    cfg = next(c.config for c in cells if c.labels.get("method") == "sage_grpo" and c.labels.get("setting") == "A"
               and c.labels.get("reward") == "world_oracle")
    return dataclasses.replace(cfg, seed=seed)


def _oracle(line: dict, setting: str) -> float:
    w = WEIGHTS[setting]
    return w[0] * line["eval_oracle_vq"] + w[1] * line["eval_oracle_mq"] + w[2] * line["eval_oracle_ta"]


def _learning(run: Path, setting: str) -> float:
    evals = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "eval_at" in r]
    return _oracle(evals[-1], setting) - _oracle(evals[0], setting)


def test_learning_under_bf16_is_equivalent_to_fp32(tmp_path):
    import dataclasses

    if not has_bf16_units(cpu=True):
        pytest.skip("this CPU has no bf16 units: bf16 is not the default here")
    rows = []
    for seed in SEEDS:
        base = dataclasses.replace(_reference_cell(seed), updates=UPDATES, eval_every=UPDATES, threads=1,
                                   save_videos=False, device="cpu")
        got = {}
        for mp in ("no", "bf16"):
            out = tmp_path / mp / f"seed{seed}"
            train(dataclasses.replace(base, mixed_precision=mp), out)
            got[mp] = _learning(out, base.setting)
        rows.append({"seed": seed, "fp32": got["no"], "bf16": got["bf16"], "d": got["bf16"] - got["no"]})
    d = [r["d"] for r in rows]
    mean, se = statistics.mean(d), statistics.stdev(d) / len(d) ** 0.5
    half = stats.t.ppf(0.95, len(d) - 1) * se
    result = {"rows": rows, "mean_d": mean, "ci90": [mean - half, mean + half], "margin": MARGIN,
              "sd_learning_fp32": statistics.stdev(r["fp32"] for r in rows), "updates": UPDATES}
    print(json.dumps(result, indent=1))
    if os.environ.get("GRPO_BENCH_BF16_JSON"):
        Path(os.environ["GRPO_BENCH_BF16_JSON"]).write_text(json.dumps(result, indent=1))
    assert -MARGIN < mean - half and mean + half < MARGIN, result
