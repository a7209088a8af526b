"""The reward registry, the reward protocol and the composite reward (grpo_bench/rewards/)."""

from __future__ import annotations

import pytest
import torch

from grpo_bench import rewards
from grpo_bench.errors import UserError
from grpo_bench.rewards.base import composite, setting_weights
from grpo_bench.world import prompts, render


def test_registry_lists_world_rewards_and_rejects_unknown_names():
    assert {"world_judge", "world_oracle"} <= set(rewards.names())
    with pytest.raises(UserError, match="world_judge"):
        rewards.load("world_jugde")


def test_register_decorator_adds_a_factory():
    name = "test_constant_reward"

    @rewards.register(name)
    class Constant:
        dimensions = ("vq", "mq", "ta")

        def __init__(self, value: float = 0.5) -> None:
            self.value = value

        def __call__(self, videos, prompts):
            return {k: torch.full((len(prompts),), self.value) for k in self.dimensions}

    try:
        r = rewards.load(name, value=2.0)
        out = r(torch.zeros(3, 3, 8, 16, 16), ["a red circle moving left"] * 3)
        assert torch.equal(composite(out, "A"), torch.full((3,), 6.0))
    finally:
        rewards.REWARDS._entries.pop(name)


def test_composite_closed_form():
    scores = {"vq": torch.tensor([1.0, -2.0]), "mq": torch.tensor([2.0, 0.5]), "ta": torch.tensor([3.0, 4.0])}
    assert torch.allclose(composite(scores, "A"), torch.tensor([6.0, 2.5]))
    assert torch.allclose(composite(scores, "B"), torch.tensor([0.5 + 1.0 + 3.0, -1.0 + 0.25 + 4.0]))
    assert torch.allclose(composite(scores, {"ta": 2.0}), torch.tensor([6.0, 8.0]))
    assert setting_weights("B") == {"vq": 0.5, "mq": 0.5, "ta": 1.0}
    with pytest.raises(UserError, match="setting"):
        composite(scores, "C")
    with pytest.raises(KeyError, match="mq"):
        composite({"vq": scores["vq"], "ta": scores["ta"]}, "A")


def test_oracle_reward_follows_the_protocol():
    texts = prompts("all")[:6]
    videos = render(texts, 0, size=16).requires_grad_(True)
    r = rewards.load("world_oracle")
    out = r(videos, texts)
    assert set(out) == {"vq", "mq", "ta"}
    for v in out.values():
        assert v.shape == (6,) and not v.requires_grad
        assert v.min() >= 0.95
    # A mismatched prompt (other colour) lowers TA only.
    other = r(
        videos, ["a blue circle moving left" if t.split()[1] != "blue" else "a red circle moving left" for t in texts]
    )
    assert (other["ta"] < 0.5).all()
    assert torch.allclose(other["vq"], out["vq"]) and torch.allclose(other["mq"], out["mq"])


def test_judge_reward_follows_the_protocol():
    texts = prompts("all")[:4]
    videos = render(texts, 0, size=16).requires_grad_(True)
    r = rewards.load("world_judge")
    out = r(videos, texts)
    assert set(out) == {"vq", "mq", "ta"} == set(r.dimensions)
    for v in out.values():
        assert v.shape == (4,) and v.dtype == torch.float32 and not v.requires_grad and torch.isfinite(v).all()
    with pytest.raises(UserError, match="trained on videos of shape"):
        r(render(texts, 0, size=24), texts)
