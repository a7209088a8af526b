"""The transfer table and figure (issue #44 item 4) on synthetic results: ranks per world with bootstrap intervals
over seeds and Kendall's tau between worlds, checked against orders and values computed by hand."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2, kendalltau

from grpo_bench.errors import UserError
from grpo_bench.report.parts import FIGURES, TABLES, Context
from grpo_bench.report.transfer import (
    BOOT,
    between_the_ends,
    consistency,
    seed_ranks,
    tau_b,
    transfer,
    world_line,
    world_scores,
)
from grpo_bench.suite.results import COLUMNS, read_table

METHODS = ("m1", "m2", "m3", "m4")


def _results(worlds: dict[tuple[str, str], dict[int, list[float]]], suite: str = "s") -> pd.DataFrame:
    """results.parquet rows: per world (model, reward) and seed, each method's held-out oracle (vq = score)."""
    rows = []
    for (model, reward), by_seed in worlds.items():
        for seed, scores in by_seed.items():
            for method, score in zip(METHODS, scores):
                cell = f"{model}-{reward}-{method}-{seed}"
                base = {"suite": suite, "cell": cell, "group": f"{method} {model} {reward}", "setting": "A",
                        "method": method, "kl": "fixed", "equalizer": False, "seed": seed}
                config = {"model": model, "reward": reward, "method": method, "setting": "A", "seed": seed}
                rows.append({**base, "kind": "cell", "metric": "wall_time", "value": 1.0,
                             "text": json.dumps({"labels": {}, "config": config, "status": "done"})})
                rows += [{**base, "kind": "final", "metric": m, "value": v}
                         for m, v in (("eval_oracle_vq", score), ("eval_oracle_mq", 0.0), ("eval_oracle_ta", 0.0))]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({k: v for k, v in COLUMNS.items() if v != "object"})


SAME = {0: [0.9, 0.7, 0.5, 0.1], 1: [0.8, 0.6, 0.4, 0.2], 2: [0.95, 0.5, 0.45, 0.3]}  # m1 > m2 > m3 > m4 always
REVERSED = {10: [0.1, 0.2, 0.3, 0.4], 11: [0.0, 0.5, 0.6, 0.9]}
MIXED = {20: [0.9, 0.8, 0.1, 0.2], 21: [0.7, 0.9, 0.3, 0.1], 22: [0.2, 0.9, 0.8, 0.1]}


def test_ranks_and_tau_match_hand_computation() -> None:
    scores = world_scores(_results({("world", "world_oracle"): SAME, ("image_world", "image_world_oracle"): SAME,
                                    ("image_world_text", "image_world_ocr"): REVERSED, ("w4", "r4"): MIXED}))
    assert len(scores) == 4 * (3 + 3 + 2 + 3) and set(scores["score"]) >= {0.9, 0.1}
    ranks, taus = transfer(scores)
    same = ranks[ranks["world"] == "world / world_oracle"].set_index("method")
    assert same["mean"].tolist() == [1, 2, 3, 4] and same["low"].tolist() == same["high"].tolist() == [1, 2, 3, 4]
    mixed = ranks[ranks["world"] == "w4 / r4"].set_index("method")
    by_hand = np.array([[1, 2, 4, 3], [2, 1, 3, 4], [3, 1, 2, 4]]).mean(axis=0)  # seeds 20, 21, 22
    assert mixed["mean"].to_numpy() == pytest.approx(by_hand)
    assert np.all(mixed["low"] <= mixed["mean"]) and np.all(mixed["mean"] <= mixed["high"])
    assert mixed.loc["m1", "low"] == 1 and mixed.loc["m1", "high"] == 3  # all three seeds' ranks are reachable
    pair = taus.set_index(["world_a", "world_b"])
    assert pair.loc[("world / world_oracle", "image_world / image_world_oracle"), "tau"] == 1.0
    assert pair.loc[("world / world_oracle", "image_world_text / image_world_ocr"), ["tau", "low", "high"]].tolist() \
        == [-1.0, -1.0, -1.0]
    want = kendalltau([1, 2, 3, 4], by_hand).statistic
    row = pair.loc[("world / world_oracle", "w4 / r4")]
    assert row["tau"] == pytest.approx(want) and row["low"] <= want <= row["high"] and row["methods"] == 4


@pytest.mark.parametrize("items", [3, 4, 10])
def test_the_bootstraps_tau_b_is_scipys_to_the_bit_ties_included(items) -> None:
    rng = np.random.default_rng(items)
    # mean ranks on a coarse grid tie often; the first row ties everywhere (tau-b undefined: NaN, as scipy)
    x, y = rng.integers(0, 4, (500, items)) / 2, rng.integers(0, 3, (500, items)) / 3
    x[0] = 1.0
    expected = np.array([kendalltau(a, b).statistic for a, b in zip(x, y)])
    np.testing.assert_array_equal(tau_b(x, y), expected)


def test_seeds_where_a_method_did_not_finish_are_left_out_and_ties_share_a_rank() -> None:
    frame = _results({("world", "world_oracle"): {0: [0.5, 0.5, 0.2, 0.1], 1: [0.9, 0.8, 0.7, 0.6]}})
    frame = frame[~((frame["seed"] == 1) & (frame["method"] == "m4") & (frame["kind"] == "final"))]
    ranks = seed_ranks(world_scores(frame))["world / world_oracle"]
    assert ranks.index.tolist() == [0] and ranks.loc[0].tolist() == [1.5, 1.5, 3, 4]


def test_the_part_reads_the_sibling_field_report_and_draws_its_figure(tmp_path) -> None:
    (tmp_path / "field").mkdir()
    _results({("world", "world_oracle"): SAME}, suite="field").to_parquet(tmp_path / "field" / "results.parquet")
    out = tmp_path / "field_image"
    out.mkdir()
    ctx = Context(_results({("image_world", "image_world_oracle"): REVERSED}, suite="field_image"), out)
    sections = TABLES.get("transfer")(ctx)
    assert "image_world / image_world_oracle vs world / world_oracle: τ = -1.00 [-1.00, -1.00] over 4 methods" \
        in sections[0].body  # this report's world first, then the sibling's
    table = pd.read_csv(out / "tables" / "transfer.csv")
    assert set(table["world"]) == {"world / world_oracle", "image_world / image_world_oracle"}
    assert FIGURES.get("transfer_ranks")(ctx) and (out / "figures" / "transfer_ranks.png").stat().st_size > 0
    assert BOOT >= 1000


def test_one_table_a_suite_the_first_sibling_found_stands_for_it(tmp_path) -> None:
    """The image world's table on portable kernels stands for its suite; the bf16 first look of the same suite
    beside it is not read again (its cells would count twice), nor is a sibling of this report's own suite."""
    for name, suite, world in (("field", "field", SAME), ("field_image_avx2", "field_image", MIXED),
                               ("field_image", "field_image", REVERSED)):
        (tmp_path / name).mkdir()
        _results({("image_world" if suite != "field" else "world", "o"): world}, suite=suite).to_parquet(
            tmp_path / name / "results.parquet")
    for here in ("field", "field_image_avx2"):  # MIXED's 3 seeds, never REVERSED's 2 beside them
        TABLES.get("transfer")(Context(read_table(tmp_path / here / "results.parquet"), tmp_path / here))
        table = pd.read_csv(tmp_path / here / "tables" / "transfer.csv")
        assert table.loc[table["world"] == "image_world / o", "seeds"].tolist() == [3] * 4


def test_a_damaged_sibling_results_file_is_one_line(tmp_path) -> None:
    (tmp_path / "field").mkdir()
    (tmp_path / "field" / "results.parquet").write_bytes(b"not parquet")
    out = tmp_path / "field_image"
    out.mkdir()
    with pytest.raises(UserError, match=r"transfer: .*field/results.parquet is not a readable results file") as info:
        TABLES.get("transfer")(Context(_results({("image_world", "image_world_oracle"): SAME}), out))
    assert "\n" not in str(info.value)


def test_one_world_says_it_needs_two() -> None:
    sections = TABLES.get("transfer")(Context(_results({("world", "world_oracle"): SAME}), __import__("pathlib").Path(
        "/nonexistent/report")))
    assert "Fewer than two worlds" in sections[0].body


def test_learners_counts_the_methods_whose_learning_interval_is_above_zero() -> None:
    """learners counts the ranked methods whose held-out oracle learning (last eval minus update 0) has its 95%
    t-interval above 0, per world: every method gains 0.2 ± 0.01 on one world, 0 ± 0.05 on the other."""
    from grpo_bench.report.transfer import learners

    frame = _results({("world", "world_oracle"): SAME, ("image_world", "image_world_oracle"): SAME})
    rng = np.random.default_rng(0)
    rows = []
    for cell in frame.loc[frame["kind"] == "cell", "cell"]:
        base = frame[(frame["cell"] == cell) & (frame["kind"] == "cell")].iloc[0].to_dict()
        gain = 0.2 + rng.normal(0, 0.01) if cell.startswith("world-") else rng.normal(0, 0.05)
        for update, value in ((0, 0.3), (10, 0.3 + gain)):
            for dim, v in (("vq", value), ("mq", 0.0), ("ta", 0.0)):
                rows.append({**base, "kind": "update", "update": update, "metric": f"eval_oracle_{dim}", "value": v,
                             "text": None})
    frame = pd.concat([frame, pd.DataFrame(rows, columns=list(COLUMNS))], ignore_index=True).astype(
        {k: v for k, v in COLUMNS.items() if v != "object"})
    found = learners(frame, world_scores(frame))
    assert found == {"world / world_oracle": (4, 4), "image_world / image_world_oracle": (0, 4)}


def test_the_seeds_agreement_is_kendalls_w_by_hand_with_friedmans_p() -> None:
    """W = 12 S / (n^2 (k^3 - k)), S the squared deviations of the methods' rank sums from their mean (no ties), and
    Friedman's chi2 = n (k - 1) W on k - 1 degrees of freedom: every seed alike is W = 1, seeds that reverse each
    other W = 0."""
    ranks = seed_ranks(world_scores(_results({("w4", "r4"): MIXED, ("world", "world_oracle"): SAME,
                                              ("w5", "r5"): {0: [0.9, 0.7, 0.5, 0.1], 1: [0.1, 0.5, 0.7, 0.9]}})))
    sums = np.array([[1, 2, 4, 3], [2, 1, 3, 4], [3, 1, 2, 4]]).sum(axis=0)  # seeds 20, 21, 22: [6, 4, 9, 11]
    w = 12 * ((sums - sums.mean()) ** 2).sum() / (3**2 * (4**3 - 4))
    mixed = consistency(ranks["w4 / r4"])
    assert mixed["w"] == pytest.approx(w) == pytest.approx(348 / 540)
    assert mixed["p"] == pytest.approx(chi2.sf(3 * 3 * w, 3)) and mixed["seeds"] == 3
    same = consistency(ranks["world / world_oracle"])
    assert same["w"] == pytest.approx(1.0) and same["p"] == pytest.approx(chi2.sf(9.0, 3))
    assert consistency(ranks["w5 / r5"])["w"] == pytest.approx(0.0) and consistency(ranks["w5 / r5"])["p"] == 1.0
    assert np.isnan(consistency(ranks["w5 / r5"].iloc[:1])["w"])  # one seed cannot agree with another


def test_taus_carry_kendalls_test_and_holm_over_the_pairs() -> None:
    scores = world_scores(_results({("world", "world_oracle"): SAME, ("image_world", "image_world_oracle"): SAME,
                                    ("w4", "r4"): MIXED}))
    _, taus = transfer(scores)
    by_hand = np.array([[1, 2, 4, 3], [2, 1, 3, 4], [3, 1, 2, 4]]).mean(axis=0)
    pair = taus.set_index(["world_a", "world_b"])
    assert pair.loc[("world / world_oracle", "w4 / r4"), "p"] == pytest.approx(kendalltau([1, 2, 3, 4], by_hand).pvalue)
    raw = taus["p"].to_numpy()
    order = np.argsort(raw)
    assert taus["p_holm"].to_numpy()[order[0]] == pytest.approx(min(1.0, 3 * raw[order[0]]))
    assert np.all(taus["p_holm"] >= taus["p"] - 1e-12)


@pytest.mark.parametrize(("p", "learned", "says"), [
    (0.03, (0, 10), "no method's learning alone is told from 0, yet its seeds agree on an order"),
    (0.62, (0, 10), "its seeds do not agree on an order at 5%, so its ranks order noise"),
    (0.62, (10, 10), "its seeds do not agree on an order at 5%, so its ranks order noise"),
    (0.2, (3, 10), "its seeds do not agree on an order at 5%, so its ranks order noise"),
    (0.001, (10, 10), "10 of 10 methods learn (held-out oracle learning, 95% interval above 0)"),
])
def test_a_worlds_verdict_reads_its_seeds_agreement_before_its_learners(p, learned, says) -> None:
    line = world_line("image_world / image_world_oracle", {"w": 0.5, "p": p, "seeds": 3}, learned)
    assert says in line and f"Friedman p = {p:.2g}, 3 seeds" in line
    assert ("order noise" in line) == (p >= 0.05)


def test_an_agreement_carried_by_the_two_ends_says_so() -> None:
    """a first and b last on both seeds, the three between them in reversed orders: the five agree at W = 0.8
    (Friedman's chi2 by hand), the three between the ends not at all (W = 0, p = 1), and the verdict names the two
    ends; where the middle agrees too (one order on four seeds) it says nothing more."""
    ranks = pd.DataFrame([[1, 5, 2, 3, 4], [1, 5, 4, 3, 2]], index=[30, 31], columns=list("abcde"), dtype=float)
    sums = ranks.sum().to_numpy()
    w = 12 * ((sums - sums.mean()) ** 2).sum() / (2**2 * (5**3 - 5))
    assert consistency(ranks)["w"] == pytest.approx(w) == pytest.approx(0.8)
    ends, middle = between_the_ends(ranks)
    assert ends == ["a", "b"] and middle["w"] == pytest.approx(0.0) and middle["p"] == pytest.approx(1.0)
    line = world_line("image_world / image_world_oracle", {"w": 0.8, "p": 0.04, "seeds": 2}, (0, 5), (ends, middle))
    assert "without a (first) and b (last) the seeds' agreement is W = 0.00 (p = 1)" in line
    same = pd.DataFrame([[1, 5, 2, 3, 4]] * 4, index=[30, 31, 32, 33], columns=list("abcde"), dtype=float)
    assert between_the_ends(same)[1]["p"] == pytest.approx(chi2.sf(4 * 2 * 1.0, 2))  # the middle's own Friedman
    assert "without" not in world_line("w", {"w": 1.0, "p": 0.01, "seeds": 4}, None, between_the_ends(same))
    assert between_the_ends(ranks[list("abcd")])[0] == []  # 2 left between the ends: no order to read
