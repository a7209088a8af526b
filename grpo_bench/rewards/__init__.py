"""Rewards behind one protocol (rewards/base.py), looked up by name.

A reward module registers a factory ``factory(**kw) -> Reward`` (a ``Reward`` subclass, or a function whose
return annotation names one) with ``@register("name", path_options=..., compute=...)``; the registry imports
this package's modules on first lookup, so a new reward (CLIPScore, PickScore, VideoAlign, ...) only needs a
new file here (docs/adding_a_reward.md). Import heavy libraries
inside the factory, not at module level, so listing rewards stays cheap.

    load("world_judge")                # the shipped learned judge (the VideoAlign stand-in)
    load("world_oracle")               # the exact oracle as a reward (tests, diagnostics)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from grpo_bench.registry import LazyRegistry
from grpo_bench.rewards.base import Reward, RewardModelWeights, declare_factory, factory_declaration

REWARDS: LazyRegistry = LazyRegistry("reward", "grpo_bench.rewards")
GROUND_TRUTH: dict[str, str] = {}
"""Prompt set -> the registered reward whose ``ground_truth`` evaluation reports as the oracle columns."""


def register(name: str, ground_truth_for: str | None = None, *,
             path_options: Mapping[str, str] | Iterable[str] = (), model_weights: RewardModelWeights | None = None,
             compute: Any = None) -> Callable[[Any], Any]:
    """Decorator registering a reward factory under ``name``: a ``Reward`` subclass, or a function whose return
    annotation names one (its keyword arguments are the reward's options). The keywords declare what can be
    checked before anything loads (rewards/base.py ``FactoryDeclaration``). ``ground_truth_for``: the prompt set
    whose exact scores it gives (its ``ground_truth(videos, prompts)``), reported beside the training reward.

    A factory that builds no ``Reward``, or whose class declares something malformed, is refused here in one
    line (a plug-in's import then fails with it)."""

    def decorator(factory: Any) -> Any:
        declared = declare_factory(name, factory, path_options, model_weights, compute)
        if ground_truth_for is not None and not declared.product.has_ground_truth:
            raise ValueError(f"reward {name!r} is registered as ground truth for {ground_truth_for!r} but its class "
                             f"{declared.product.__qualname__} has no ground truth (has_ground_truth = False)")
        REWARDS.register(name)(factory)
        if ground_truth_for is not None:
            GROUND_TRUTH[ground_truth_for] = name
        return factory

    return decorator


def product(name: str) -> type[Reward]:
    """The ``Reward`` subclass the reward registered as ``name`` builds (its declarations, without loading it)."""
    return factory_declaration(REWARDS.get(name)).product


def declares_ground_truth(prompt_set: str) -> bool:
    """Whether a registered reward gives exact scores for the named prompt set (its own oracle)."""
    REWARDS.names()  # imports every reward module and plug-in, so each declaration is made
    return prompt_set in GROUND_TRUTH


def is_ground_truth(reward: str) -> bool:
    """Whether the named reward is some prompt set's exact oracle (a run trained on it is judged by nothing)."""
    REWARDS.names()
    return reward in GROUND_TRUTH.values()


def ground_truth(prompt_set: str) -> Any:
    """The ground-truth scorer declared for ``prompt_set`` (UserError naming the sets that have one)."""
    from grpo_bench.errors import UserError

    REWARDS.names()  # imports every reward module, so each declaration is made
    if prompt_set not in GROUND_TRUTH:
        raise UserError(f"no reward declares ground truth for prompt set {prompt_set!r}; "
                        f"declared for: {', '.join(sorted(GROUND_TRUTH)) or 'none'}")
    return _build(GROUND_TRUTH[prompt_set])


def load(name: str, **kw: Any) -> Reward:
    """Build the reward registered as ``name``; keyword arguments go to its factory."""
    return _build(name, **kw)


def _build(name: str, **kw: Any) -> Reward:
    # The oracle is built here, not through ``load``: a run that swaps its training reward (a test's stand-in, a
    # plug-in's wrapper of ``load``) must still be judged by the prompt set's exact scorer.
    reward = REWARDS.get(name)(**kw)
    if not isinstance(reward, Reward):  # a factory whose annotation promised a Reward and built something else
        raise TypeError(f"reward {name!r}: its factory built a {type(reward).__name__}, not a grpo_bench.api.Reward")
    return reward


def names() -> list[str]:
    return REWARDS.names()
