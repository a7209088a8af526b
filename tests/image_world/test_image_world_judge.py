"""The compositional task's learned judge (the judge track's training reward): registered, reading images and
prompts the way the checker does on clean against damaged scenes, bad input in one line."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from grpo_bench import rewards
from grpo_bench.config.identity import asset_digests, file_digest
from grpo_bench.config.run import from_dict
from grpo_bench.errors import UserError
from grpo_bench.image_world.grammar import prompts
from grpo_bench.image_world.judge import DEFAULT_JUDGE, ImageJudge, load_judge, save_judge
from grpo_bench.image_world.render import render


def test_the_judge_is_a_training_reward_and_the_checker_still_evaluates() -> None:
    cfg = from_dict({"model": "image_world", "reward": "image_world_judge"})
    assert cfg.eval_oracle and cfg.prompts == "image_world"
    assert not rewards.is_ground_truth("image_world_judge") and rewards.is_ground_truth("image_world_oracle")
    assert asset_digests(cfg.model, cfg.reward)["reward"] == file_digest(DEFAULT_JUDGE)  # a rebuilt judge: new ids
    card = json.loads(DEFAULT_JUDGE.with_suffix(".json").read_text())
    assert card["sha256"] == hashlib.sha256(DEFAULT_JUDGE.read_bytes()).hexdigest()
    assert set(card["spearman_heldout_base"]) == {"vq", "mq", "ta"}


def test_the_shipped_judge_prefers_clean_scenes_and_matching_prompts() -> None:
    """Pairs on the same prompt: a clean rendered scene against the same scene re-noised halfway (VQ), and a scene
    under its own prompt against under another prompt (TA). The checker prefers the first of every pair."""
    judge = rewards.load("image_world_judge")
    texts = prompts("train")[::12][:40]
    clean = render(texts, seed=5)
    noisy = 0.5 * clean + 0.5 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(0))
    a, b = judge(clean, texts), judge(noisy, texts)
    assert float((a["vq"] > b["vq"]).float().mean()) >= VQ_PAIRS
    others = texts[1:] + texts[:1]
    swapped = judge(clean, others)
    assert float((a["ta"] > swapped["ta"]).float().mean()) >= TA_PAIRS


VQ_PAIRS, TA_PAIRS = 0.9, 0.75
"""Least share of pairs the shipped judge orders as the checker does (measured: see docs/image_world.md)."""


def test_bad_input_is_one_line(tmp_path) -> None:
    judge = rewards.load("image_world_judge")
    with pytest.raises(UserError, match=r"reward image_world_judge: expected images Tensor\[B, 3, 1, 32, 32\]"):
        judge(torch.zeros(1, 3, 1, 16, 16), ["a red circle"])
    with pytest.raises(UserError, match="image-world prompt 'a red dragon'"):
        judge(torch.zeros(1, 3, 1, 32, 32), ["a red dragon"])
    path = tmp_path / "j.safetensors"
    save_judge(ImageJudge(), path)
    assert isinstance(load_judge(path), ImageJudge)
    path.write_bytes(b"junk")
    with pytest.raises(UserError, match=r"j.safetensors are corrupt or incompatible.*judge_pretrain --out") as info:
        load_judge(path)
    assert "\n" not in str(info.value)


def test_a_run_trains_on_the_judge_and_is_evaluated_by_the_checker(tmp_path) -> None:
    from grpo_bench import models
    from grpo_bench.train.trainer import train

    cfg = from_dict({"model": "image_world", "reward": "image_world_judge", "method": "flow_grpo", "steps": 4,
                     "prompts_per_update": 2, "group_size": 2, "updates": 1, "eval_every": 1, "minibatches": 1,
                     "eval_samples": 1, "diag_every": 0, "checkpoint_every": 10, "device": "cpu",
                     "save_videos": False, "threads": 1})
    final = train(cfg, tmp_path / "run", model=models.load("image_world"), reward=rewards.load(cfg.reward))
    ev = final["eval"]
    assert 0 <= ev["eval_oracle_ta"] <= 1 and 0 <= ev["eval_correct"] <= 1  # the checker's columns
    assert abs(ev["eval_reward"]) < 20  # the judge's z-scores, summed over vq, mq, ta
