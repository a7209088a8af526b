"""judge_check's logic on hand-made scores: a perfect judge passes, a constant or reversed one fails."""

from __future__ import annotations

import pytest
import torch

from grpo_bench.pretrain.judge_check import judge_metrics, pair_accuracy, spearman
from grpo_bench.world.corrupt import shuffle_frames


def _scores(seed: int, n: int = 20) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.rand(n, generator=g) for k in ("vq", "mq", "ta")}


def _shifted(scores: dict[str, torch.Tensor], by: float) -> dict[str, torch.Tensor]:
    return {k: v + by for k, v in scores.items()}


def test_a_perfect_judge_scores_spearman_one_and_every_pair():
    truth = {"train": _scores(0), "heldout": _scores(1)}
    # the judge = a monotone map of the oracle (log), damaged videos score lower
    judge = {split: {k: v.log() for k, v in s.items()} for split, s in truth.items()}
    judge["train_speckle"] = _shifted(judge["train"], -0.1)
    judge["train_shuffle"] = _shifted(judge["train"], -1.0)
    out = judge_metrics(judge, truth)
    assert out["spearman_train"] == {"vq": 1.0, "mq": 1.0, "ta": 1.0}
    assert out["spearman_heldout"] == {"vq": 1.0, "mq": 1.0, "ta": 1.0}
    assert out["speckle_pairs"] == 1.0 and out["shuffle_pairs"] == 1.0 and out["passes"] is True


def test_a_constant_judge_fails_every_target():
    truth = {"train": _scores(0), "heldout": _scores(1)}
    const = {k: torch.zeros(20) for k in ("vq", "mq", "ta")}
    judge = {"train": const, "heldout": const, "train_speckle": const, "train_shuffle": const}
    out = judge_metrics(judge, truth)
    assert set(out["spearman_train"].values()) == {0.0} and set(out["spearman_heldout"].values()) == {0.0}
    assert out["speckle_pairs"] == 0.0 and out["shuffle_pairs"] == 0.0  # ties are not "lower"
    assert out["passes"] is False


def test_one_weak_dimension_or_one_damage_kind_fails_the_check():
    truth = {"train": _scores(0), "heldout": _scores(1)}
    judge = {split: dict(s) for split, s in truth.items()}
    judge["heldout"]["mq"] = -truth["heldout"]["mq"]  # reversed on one dimension, one split
    judge["train_speckle"] = _shifted(judge["train"], -0.1)
    judge["train_shuffle"] = _shifted(judge["train"], -0.1)
    out = judge_metrics(judge, truth)
    assert out["spearman_heldout"]["mq"] == -1.0 and out["spearman_train"]["mq"] == 1.0 and not out["passes"]
    judge["heldout"]["mq"] = truth["heldout"]["mq"]
    # shuffled videos score higher in 3 of 20 pairs (overall = sum of dimensions): 85% still passes,
    judge["train_shuffle"]["vq"] = judge["train"]["vq"] - 0.1 + torch.tensor([1.0] * 3 + [0.0] * 17)
    out = judge_metrics(judge, truth)
    assert out["shuffle_pairs"] == pytest.approx(0.85) and out["passes"]
    # 5 of 20 (75%) fails
    judge["train_shuffle"]["vq"] = judge["train"]["vq"] - 0.1 + torch.tensor([1.0] * 5 + [0.0] * 15)
    out = judge_metrics(judge, truth)
    assert out["shuffle_pairs"] == pytest.approx(0.75) and not out["passes"]


def test_pair_accuracy_and_spearman_closed_form():
    assert pair_accuracy(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0.0, 2.0, 5.0, 3.0])) == 0.5
    # 1 discordant swap of 4 ranks: rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 4.0, 3.0])) == pytest.approx(0.8)


def test_shuffle_frames_moves_frames_and_keeps_their_content():
    v = torch.arange(8, dtype=torch.float32)[None, None, :, None, None].expand(3, 3, 8, 2, 2).clone()
    out = shuffle_frames(v, 1.0, seed=3)
    for i in range(3):  # a permutation of the frames, never the identity at full strength
        order = out[i, 0, :, 0, 0]
        assert sorted(order.tolist()) == list(range(8)) and (order != torch.arange(8)).all()
    assert torch.equal(shuffle_frames(v, 0.0, seed=3), v)
    moved = (shuffle_frames(v, 0.5, seed=3)[:, 0, :, 0, 0] != torch.arange(8)).sum(1)
    assert (moved == 4).all()  # round(0.5 * 8) frames trade places, cyclically: all 4 move
