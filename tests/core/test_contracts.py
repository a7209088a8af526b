"""Every registered kernel, method, KL variant, anchor policy, reward and model passes the same
contract (tests/_support/contracts.py). The lists come from the registries, which load methods/, installed
plug-ins and GRPO_BENCH_PLUGINS first: nothing here names the shipped plug-ins."""

from __future__ import annotations

import inspect

import pytest
import torch
from contracts import check_anchor_policy, check_kernel, check_kl_variant, check_method

from grpo_bench import models, rewards
from grpo_bench.core.anchors import ANCHOR_POLICIES
from grpo_bench.core.method import METHODS
from grpo_bench.core.sde import KERNELS
from grpo_bench.core.trust_region import KL_VARIANTS
from grpo_bench.errors import UserError
from grpo_bench.rewards.base import SETTINGS, Reward, check_declarations, factory_declaration
from grpo_bench.world.roles import WORLDS


@pytest.mark.parametrize("name", KERNELS.names())
def test_kernel_contract(name):
    check_kernel(name)


@pytest.mark.parametrize("name", METHODS.names())
def test_method_contract(name):
    check_method(name)


@pytest.mark.parametrize("name", KL_VARIANTS.names())
def test_kl_variant_contract(name):
    check_kl_variant(name)


@pytest.mark.parametrize("name", ANCHOR_POLICIES.names())
def test_anchor_policy_contract(name):
    check_anchor_policy(name)


def _build_or_skip(build):
    """A plug-in that needs weights this machine does not have says so with a UserError (then: skip)."""
    try:
        return build()
    except UserError as exc:
        pytest.skip(f"not buildable offline: {str(exc)[:80]}")


WORLD_PROMPTS = ("a red circle moving left", "a blue square moving up")
"""What a reward or model is fed unless it declares ``example_prompts`` (the prompts it takes)."""


@pytest.mark.parametrize("name", rewards.names())
def test_reward_declarations(name):
    """Every registered reward builds a ``Reward`` whose class-level declarations are well-formed, read without
    loading anything (so a reward whose weights are not on this machine is checked too)."""
    factory = rewards.REWARDS.get(name)
    cls = rewards.product(name)
    assert issubclass(cls, Reward) and not inspect.isabstract(cls), cls
    assert factory is cls or inspect.isfunction(factory)  # a class, or a function annotated to return one
    dims = cls.dimensions
    assert isinstance(dims, tuple) and dims and all(isinstance(d, str) and d for d in dims)
    table = cls.settings or SETTINGS  # a run's setting A or B must weigh this reward's own scores
    assert set(table) == set(SETTINGS), f"{name}: settings {sorted(table)}, runs use {sorted(SETTINGS)}"
    for weights in table.values():
        assert set(weights) <= set(dims) and all(isinstance(w, float) for w in weights.values())
    assert cls.modality in ("video", "image", "any")
    size = cls.media_size
    assert size is None or isinstance(size, int) or (len(size) == 2 and all(isinstance(v, int) for v in size))
    assert size is None or cls.modality == "image"  # a fixed frame size is a reader of stills
    assert cls.example_prompts is None or (isinstance(cls.example_prompts, tuple) and all(
        isinstance(p, str) and p.strip() for p in cls.example_prompts))
    assert isinstance(cls.differentiable, bool) and isinstance(cls.has_ground_truth, bool)
    assert cls.has_ground_truth == (cls.ground_truth is not Reward.ground_truth)  # the flag and the method agree
    assert cls.has_ground_truth or name not in rewards.GROUND_TRUTH.values()
    declared = factory_declaration(factory)
    assert declared.product is cls and declared.modality == cls.modality
    params = inspect.signature(factory).parameters
    forwards = any(p.kind is p.VAR_KEYWORD for p in params.values())  # e.g. videoalign_16fps(**kw)
    assert all(option in params or forwards for option in declared.path_options), (name, declared.path_options)
    assert check_declarations(cls) == []


@pytest.mark.parametrize("name", rewards.names())
def test_reward_contract(name, monkeypatch):
    factory = rewards.REWARDS.get(name)
    cls = rewards.product(name)
    params = inspect.signature(factory).parameters
    assert factory.__doc__
    assert "device" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    reward = _build_or_skip(lambda: rewards.load(name, device="cpu"))
    assert isinstance(reward, cls)
    frames = 1 if cls.modality == "image" else 8  # a reward of stills scores one frame
    size = cls.media_size or 16  # a reward bound to one size (an embedded world's checker) says so
    height, width = size if isinstance(size, tuple) else (size, size)
    videos = torch.rand(2, 3, frames, height, width, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():  # prompts of the form the reward declares it scores, else the video world's
        scores = reward(videos, list(cls.example_prompts or WORLD_PROMPTS))
    assert set(reward.dimensions) <= set(scores)
    for key in reward.dimensions:
        assert scores[key].shape == (2,) and torch.isfinite(scores[key].float()).all()
    if cls.has_ground_truth:  # the exact columns include every dimension the reward itself returns
        with torch.no_grad():
            truth = reward.ground_truth(videos, list(cls.example_prompts or WORLD_PROMPTS))
        assert set(reward.dimensions) <= set(truth)


@pytest.mark.parametrize("name", WORLDS.names())
def test_world_roles(name):
    """A world's roles name registered parts that fit together: its oracle is the ground truth of its prompt set,
    and its judge and oracle score what its model makes (stills or videos)."""
    from grpo_bench.config.prompts import load_prompt_set

    roles = WORLDS.get(name)
    assert roles.name == name
    assert rewards.GROUND_TRUTH.get(roles.prompts) == roles.oracle
    assert load_prompt_set(roles.prompts).eval  # a registered set with held-out prompts, not a file
    kind = models.modality(roles.model)
    for reward in (roles.judge, roles.oracle):
        assert rewards.product(reward).modality in (kind, "any"), (reward, kind)
    assert rewards.product(roles.oracle).has_ground_truth


@pytest.mark.parametrize("name", models.names())
def test_model_contract(name, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    factory = models.MODELS.get(name)
    assert factory.__doc__
    assert "section" in inspect.signature(factory).parameters  # a run hands its ModelSection by this name
    # built as a run builds it: from its model section (a still-image model's run has one frame, config/run.py)
    frames = {"frames": 1} if models.modality(name) == "image" else {}
    build = models.ModelSection(model=name, device="cpu", **frames)
    model = _build_or_skip(lambda: models.build(name, pretrained=False, section=build))
    shape = tuple(model.latent_shape)
    x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))
    cond = model.encode_prompts(list(getattr(factory, "example_prompts", WORLD_PROMPTS)))
    with torch.no_grad():
        v = model.velocity(x, torch.tensor([0.3, 0.9]), cond)
        v_null = model.velocity(x, torch.tensor([0.3, 0.9]), model.null_cond(2))
        videos = model.decode(x)
    assert v.shape == x.shape and torch.isfinite(v).all() and torch.isfinite(v_null).all()
    assert videos.ndim == 5 and videos.shape[:2] == (2, 3) and float(videos.abs().max()) <= 1 + 1e-5
    assert any(p.requires_grad for p in model.trainable_module().parameters())
    assert model.modality == models.modality(name)  # what it registered with is what it builds
    assert isinstance(model.supports_sequence_parallel, bool) and model.sequence_parallel_group is None
    model.enable_sequence_parallel(1, torch.device("cpu"))  # sp = 1 changes nothing, on every model
    assert model.sequence_parallel_group is None
