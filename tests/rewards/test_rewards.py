"""The reward registry, the reward protocol and the composite reward (grpo_bench/rewards/)."""

from __future__ import annotations

import pytest
import torch

from grpo_bench import rewards
from grpo_bench.errors import UserError
from grpo_bench.rewards.base import Reward, composite, setting_weights
from grpo_bench.world import prompts, render


def test_registry_lists_world_rewards_and_rejects_unknown_names():
    assert {"world_judge", "world_oracle"} <= set(rewards.names())
    with pytest.raises(UserError, match="world_judge"):
        rewards.load("world_jugde")


def test_register_decorator_adds_a_factory():
    name = "test_constant_reward"

    @rewards.register(name)
    class Constant(Reward):
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


class NotAReward:
    """Scores like a reward but does not implement the protocol (module level: an annotation can name it)."""

    def __call__(self, videos, prompts):
        return {"vq": videos.flatten(1).mean(1)}


class Constant(Reward):
    dimensions = ("c",)
    settings = {"A": {"c": 1.0}, "B": {"c": 0.5}}

    def __call__(self, videos, prompts):
        return {"c": torch.ones(len(prompts))}


def make_constant(device: str | None = None) -> Constant:
    """A function factory: its return annotation names the class it builds."""
    return Constant()


def make_not_a_reward(device: str | None = None) -> NotAReward:
    return NotAReward()


def make_unannotated(device=None):
    return Constant()


@pytest.mark.parametrize("factory, says", [
    (NotAReward, "must be a grpo_bench.api.Reward subclass"),
    (make_not_a_reward, "return annotation 'NotAReward'"),
    (make_unannotated, "no return annotation"),
])
def test_registration_refuses_a_factory_that_builds_no_reward(factory, says):
    with pytest.raises(ValueError, match="reward 'test_refused'") as caught:
        rewards.register("test_refused")(factory)
    assert says in str(caught.value) and "\n" not in str(caught.value)  # one line, as a plug-in's import shows it
    assert "test_refused" not in rewards.REWARDS  # nothing was registered


def test_registration_refuses_malformed_declarations_and_false_ground_truth():
    class BadModality(Constant):
        modality = "audio"

    class Unweighted(Constant):
        settings = {"A": {"vq": 1.0}, "B": {"c": 1.0}}  # weighs a score it does not return

    for cls, says in ((BadModality, "modality must be one of video, image, any"),
                      (Unweighted, "settings['A'] must weigh some of ['c']")):
        with pytest.raises(ValueError, match="reward 'test_bad'") as caught:
            rewards.register("test_bad")(cls)
        assert says in str(caught.value)
    with pytest.raises(ValueError, match="has no ground truth"):
        rewards.register("test_bad", ground_truth_for="world")(Constant)
    assert "test_bad" not in rewards.REWARDS and rewards.GROUND_TRUTH["world"] == "world_oracle"


def test_a_function_factory_declares_its_product_and_options():
    from grpo_bench.rewards.base import factory_declaration

    try:
        rewards.register("test_function_factory", path_options=("device",))(make_constant)
        declared = factory_declaration(make_constant)
        assert declared.product is Constant and rewards.product("test_function_factory") is Constant
        assert dict(declared.path_options) == {"device": "file or folder"} and declared.modality == "any"
        assert rewards.load("test_function_factory").settings["B"] == {"c": 0.5}
        with pytest.raises(ValueError, match="path option kinds"):
            rewards.register("test_function_kinds", path_options={"device": "url"})(make_constant)
    finally:
        rewards.REWARDS.unregister("test_function_factory")


def test_declaration_reads_a_built_reward_and_refuses_other_objects():
    from grpo_bench.rewards.base import declaration

    judge = rewards.load("world_judge")
    got = declaration(judge)
    assert got.video_shape == (3, 8, 16, 16) and got.modality == "video" and not got.has_ground_truth
    assert declaration(rewards.load("world_oracle")).has_ground_truth
    with pytest.raises(TypeError, match="grpo_bench.api.Reward"):
        declaration(NotAReward())


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
