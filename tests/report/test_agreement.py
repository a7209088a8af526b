"""judge_agreement: judge-vs-oracle pairwise agreement binned by distance from the base, on a hand-made frame."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from grpo_bench.report.agreement import agreement_by_distance, agreement_pairs, cell_distances
from grpo_bench.report.parts import TABLES, Context
from grpo_bench.suite.results import COLUMNS

GROUPS = ("g1", "g2", "g3")
MANIFOLD_CHANGE = {"g1": 0.01, "g2": -0.02, "g3": 0.05}  # |.| = cell distance; pairs take the larger
KL = {"g1": 0.0, "g2": 0.001, "g3": 0.002}  # g1 logs zeros (kl: none): no KL distance
ORACLE = {"g1": 0.5, "g2": 0.4, "g3": 0.3}  # the oracle prefers g1 > g2 > g3 on every video
JUDGE = {  # (seed, sample) -> judge_reward per group
    (0, 0): {"g1": 1.0, "g2": 0.0, "g3": 2.0},  # pairs (g1,g2) agree; (g1,g3), (g2,g3) disagree
    (0, 1): {"g1": 0.0, "g2": 0.0, "g3": 0.0},  # ties: every pair counts half
    (1, 0): {"g1": 3.0, "g2": 2.0, "g3": 1.0},  # all agree
    (1, 1): {"g1": 0.0, "g2": 1.0, "g3": 2.0},  # all disagree
}


def _row(group: str, seed: int, **kw) -> dict:
    return {"suite": "t", "cell": f"{group}-{seed}", "group": group, "setting": "A", "method": group, "kl": "none",
            "equalizer": False, "seed": seed, **kw}


def _frame() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        for g in GROUPS:
            rows.append(_row(g, seed, kind="cell", metric="wall_time", value=1.0,
                             text=json.dumps({"config": {}, "status": "done"})))
            for update, manifold in ((0, 0.1), (10, 0.1 + MANIFOLD_CHANGE[g])):
                rows.append(_row(g, seed, kind="update", update=update, metric="eval_manifold", value=manifold))
                rows.append(_row(g, seed, kind="update", update=update, metric="kl", value=KL[g]))
            for sample in (0, 1):
                key = {"kind": "video", "prompt": "a red circle moving left", "sample": sample, "video_seed": seed}
                rows.append(_row(g, seed, metric="judge_reward", value=JUDGE[(seed, sample)][g], **key))
                for dim, value in (("vq", ORACLE[g]), ("mq", 0.0), ("ta", 0.0)):  # setting A: overall = sum
                    rows.append(_row(g, seed, metric=f"oracle_{dim}", value=value, **key))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def test_cell_distances_are_absolute_manifold_change_and_measured_kl_only():
    dist = cell_distances(_frame()).set_index("cell")
    assert dist.loc["g2-0", "manifold"] == pytest.approx(0.02) and dist.loc["g3-1", "manifold"] == pytest.approx(0.05)
    assert pd.isna(dist.loc["g1-0", "kl"]) and dist.loc["g3-0", "kl"] == pytest.approx(0.002)


def test_pairs_agreement_and_distance_bins_match_the_hand_count():
    pairs = agreement_pairs(_frame())
    assert len(pairs) == 12  # 3 group pairs x 2 seeds x 2 samples
    per = pairs.groupby(["a", "b"])["agree"].mean()
    assert per[("g1", "g2")] == 0.625 and per[("g1", "g3")] == 0.375 and per[("g2", "g3")] == 0.375
    table = agreement_by_distance(pairs).set_index(["distance", "bin"])
    assert table.loc[("all", "all"), "agreement"] == pytest.approx(5.5 / 12)
    # manifold: 4 pairs at 0.02 (g1,g2), 8 at 0.05; tercile edges 0.02, 0.04, 0.05 -> two bins
    assert table.loc[("manifold", "1"), "pairs"] == 4 and table.loc[("manifold", "1"), "agreement"] == 0.625
    assert table.loc[("manifold", "2"), "pairs"] == 8 and table.loc[("manifold", "2"), "agreement"] == 0.375
    # kl: only (g2, g3) has a KL on both sides
    kl = table.loc["kl"]
    assert len(kl) == 1 and kl.iloc[0]["pairs"] == 4 and kl.iloc[0]["agreement"] == 0.375
    assert table.loc[("all", "all"), "ci_low"] <= 5.5 / 12 <= table.loc[("all", "all"), "ci_high"]


def test_registered_table_writes_its_files(tmp_path):
    sections = TABLES.get("judge_agreement")(Context(_frame(), tmp_path))
    assert sections and "0.458" in sections[0].body
    csv = pd.read_csv(tmp_path / "tables" / "judge_agreement.csv")
    assert set(csv["distance"]) == {"all", "manifold", "kl"}
