"""The stored field table (reports/field): its speed-claim findings recomputed independently from the raw results
rows, with numpy alone (no report code): held-out oracle = the setting's weighted oracle dimensions at each eval
point, learning = that minus update 0, training compute at point p = the ``compute_training`` total logged on update
line p - 1, the faster row read at ``fraction`` x the slower row's median compute to finish by straight-line
interpolation, minus the slower row's learning at its end, paired by seed. And the second look's stored block
(reports/field/look2_cells.parquet) holds only that look's finished cells, so restoring it resumes the look."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpo_bench.cli.decide import seeds_at
from grpo_bench.report.claims import CLAIMS, evaluate
from grpo_bench.report.claims.speed import Faster
from grpo_bench.rewards.base import SETTINGS  # the setting's oracle weights (Table 2's definition)
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.selection import chosen_points
from grpo_bench.suite.tune import with_chosen

ROOT = Path(__file__).resolve().parents[1]
FIELD = ROOT / "reports" / "field" / "results.parquet"
SPEED = [c for c in CLAIMS if c.key.endswith("_speed")]


@pytest.fixture(scope="module")
def curves() -> dict[tuple[str, str], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """(method, reward) of the as-shipped rows -> {seed: (compute, learning) at the eval points}."""
    df = pd.read_parquet(FIELD)
    configs = {r.cell: json.loads(r.text)["config"] for r in df[df["kind"] == "cell"].itertuples()}
    updates = df[df["kind"] == "update"]
    out: dict[tuple[str, str], dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for cell, cfg in configs.items():
        if cfg.get("max_train_steps") is not None:
            continue
        mine = updates[updates["cell"] == cell]
        wide = mine.pivot_table(index="update", columns="metric", values="value", aggfunc="last")
        ev = wide.dropna(subset=["eval_oracle_vq"])
        points = ev["eval_at"].fillna(pd.Series(ev.index, index=ev.index)).astype(int).to_numpy()
        w = SETTINGS[cfg["setting"]]
        oracle = sum(w[d] * ev[f"eval_oracle_{d}"].to_numpy(float) for d in ("vq", "mq", "ta"))
        spent = wide["compute_training"].to_dict()
        compute = np.array([0.0 if p == 0 else float(spent[p - 1]) for p in points])
        order = np.argsort(points)
        learning = oracle[order] - oracle[order][points[order] == 0][0]
        out.setdefault((cfg["method"], cfg["reward"]), {})[int(cfg["seed"])] = (compute[order], learning)
    return out


def independent(curves, check: Faster, reward: str) -> tuple[float, int]:
    """(mean paired difference, seeds paired)."""
    fast, slow = curves[(check.row["method"], reward)], curves[(check.versus["method"], reward)]
    finish_slow = float(np.median([c[-1] for c, _ in slow.values()]))
    finish_fast = float(np.median([c[-1] for c, _ in fast.values()]))
    budget = min(check.fraction * finish_slow, finish_fast)
    seeds = sorted(set(fast) & set(slow))
    return float(np.mean([np.interp(budget, *fast[s]) - slow[s][1][-1] for s in seeds])), len(seeds)


@pytest.mark.parametrize("claim", SPEED, ids=[c.key for c in SPEED])
def test_speed_findings_match_an_independent_computation(claim, curves):
    (check,) = claim.checks
    verdict = evaluate(claim, ROOT / "reports")
    (_, _, findings), = verdict.checks
    assert len(findings) == 2  # one per reward track of Setting A
    for finding in findings:
        reward = re.search(r"reward=(\w+)", finding.label).group(1)
        measured = float(re.match(r"([+-]\d+\.\d+)", finding.effect).group(1))
        mean, seeds = independent(curves, check, reward)
        assert measured == pytest.approx(mean, abs=6e-4), finding.effect
        assert finding.effect.endswith(f"({seeds} seeds)") and seeds >= 3


def test_the_stored_second_look_block_holds_cells_of_that_look():
    """reports/field/look2_cells.parquet (finished cells of the second look, restorable with `grpo-bench restore`)
    holds only cells the suite expands to at its stored choice with the second look's seeds, all finished; the
    only others are DiffusionNFT's of the reading before it followed its official code, ids as release 0.4's code
    expanded them (tests/golden/suite_cell_ids.json ``field@0.4``): stored, no longer this suite's cells."""
    block = pd.read_parquet(ROOT / "reports" / "field" / "look2_cells.parquet")
    rows = block[block["kind"] == "cell"]
    suite = load_suite(ROOT / "suites" / "field.yaml")
    chosen = chosen_points(json.loads((ROOT / "reports" / "field" / "tuned.json").read_text()))
    second = dataclasses.replace(suite, seeds=seeds_at(suite.seeds, 6)[3:])
    expected = {c.id for c in expand(with_chosen(second, chosen))}
    before_nft = set(json.loads((ROOT / "tests" / "golden" / "suite_cell_ids.json").read_text())["field@0.4"])
    stale = rows[~rows["cell"].isin(expected)]
    assert len(rows) and set(stale["cell"]) <= before_nft and set(stale["method"]) <= {"diffusion_nft"}
    assert all(json.loads(t)["status"] == "done" for t in rows["text"])
