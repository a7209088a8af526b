"""benchmarks/gradient_noise.py: the unbiased split of a batch gradient's squared norm into signal |E g|^2 and noise
E|g - E g|^2, and one batch's gradient read off the trainer on the tiny image world."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gradient_noise as gn  # noqa: E402


def test_two_batches_signal_is_their_dot_product_and_noise_half_their_squared_distance():
    g1, g2 = torch.tensor([3.0, 1.0, 0.0]), torch.tensor([1.0, -1.0, 2.0])
    got = gn.signal_noise(torch.stack([g1, g2]))
    assert got["signal"] == pytest.approx(float(g1 @ g2))  # 2
    # mean |g|^2 - g1.g2 = (10 + 6) / 2 - 2 = 6 = |g1 - g2|^2 / 2 (the unbiased variance of two draws)
    assert got["noise"] == pytest.approx(float((g1 - g2).pow(2).sum()) / 2)
    assert got["batches"] == pytest.approx(3.0) and got["snr"] == pytest.approx(1 / 3)
    assert got["cosine"] == pytest.approx(float(g1 @ g2 / (g1.norm() * g2.norm())))
    assert got["signal_se"] != got["signal_se"]  # NaN: two batches leave one pair, nothing to jackknife


def test_recovers_a_known_mean_and_covariance():
    # g = mu + eps, |mu|^2 = 4, eps ~ N(0, 0.5^2 I) in 400 dimensions: trace 100, so 25 batches for SNR 1
    gen = torch.Generator().manual_seed(0)
    mu = torch.zeros(400)
    mu[:4] = 1.0
    grads = mu + 0.5 * torch.randn(2000, 400, generator=gen)
    got = gn.signal_noise(grads)
    assert got["signal"] == pytest.approx(4.0, abs=0.15)
    # the jackknife's standard error against the spread of the estimate over 200 independent sets of 20 batches:
    # conservative, as the jackknife is for a U-statistic (Efron-Stein), here by about a quarter
    sets = [gn.signal_noise(mu + 0.5 * torch.randn(20, 400, generator=gen)) for _ in range(200)]
    spread = torch.tensor([s["signal"] for s in sets]).std().item()
    assert spread < torch.tensor([s["signal_se"] for s in sets]).mean().item() < 1.5 * spread
    assert got["noise"] == pytest.approx(100.0, rel=0.02)
    assert got["batches"] == pytest.approx(25.0, rel=0.05)


def test_identical_batches_have_no_noise():
    g = torch.tensor([[1.0, 2.0]] * 3)
    got = gn.signal_noise(g)
    assert got["noise"] == pytest.approx(0.0, abs=1e-12) and got["cosine"] == pytest.approx(1.0)


def test_blocks_of_sums_give_the_same_estimate_and_one_batch_blocks_the_same_jackknife():
    gen = torch.Generator().manual_seed(1)
    grads = torch.tensor([1.0, -2.0, 0.5]) + torch.randn(12, 3, generator=gen)
    whole = gn.signal_noise(grads)

    def blocks(size):
        return [(g.sum(0), float((g * g).sum()), len(g)) for g in grads.split(size)]

    by_four = gn.block_signal_noise(blocks(4))
    assert by_four["signal"] == pytest.approx(whole["signal"]) and by_four["noise"] == pytest.approx(whole["noise"])
    assert by_four["batches_drawn"] == 12 and by_four["blocks"] == 3
    one = gn.block_signal_noise(blocks(1))
    assert one["signal_se"] == pytest.approx(whole["signal_se"])  # delete-one-block = delete-one-batch


def test_saved_blocks_pool_and_a_foreign_block_is_one_line(tmp_path):
    gen = torch.Generator().manual_seed(2)
    grads = list(torch.randn(6, 5, generator=gen))
    key = {"model": "m", "reward": "r", "method": "flow_grpo", "batch": "8x8"}
    gn.save_block(tmp_path, key, 0, 0, grads[:3])
    gn.save_block(tmp_path, key, 1, 0, grads[3:])
    got_key, blocks = gn.read_blocks(tmp_path)
    assert got_key == key and sorted(b[2] for b in blocks) == [3, 3]
    pooled = gn.block_signal_noise(blocks)
    assert pooled["signal"] == pytest.approx(gn.signal_noise(torch.stack(grads))["signal"])
    gn.save_block(tmp_path, {**key, "reward": "other"}, 2, 0, grads[:2])
    with pytest.raises(SystemExit, match="one folder holds one configuration"):
        gn.read_blocks(tmp_path)
    (tmp_path / "seed2_u00000.pt").write_bytes(b"not a tensor file")
    with pytest.raises(SystemExit, match="not a gradient block"):
        gn.read_blocks(tmp_path)
