"""Rewards behind one protocol (rewards/base.py), looked up by name.

A reward module registers a factory ``factory(**kw) -> Reward`` (a class or a function) with
``@register("name")``; the registry imports this package's modules on first lookup, so a new
reward (CLIPScore, PickScore, VideoAlign, ...) only needs a new file here. Import heavy libraries
inside the factory, not at module level, so listing rewards stays cheap.

    load("world_judge")                # the shipped learned judge (the VideoAlign stand-in)
    load("world_oracle")               # the exact oracle as a reward (tests, diagnostics)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_bench.registry import LazyRegistry

REWARDS: LazyRegistry = LazyRegistry("reward", "grpo_bench.rewards")
GROUND_TRUTH: dict[str, str] = {}
"""Prompt set -> the registered reward whose ``ground_truth`` evaluation reports as the oracle columns."""


def register(name: str, ground_truth_for: str | None = None) -> Callable[[Any], Any]:
    """Decorator registering a reward factory under ``name``; ``ground_truth_for``: the prompt set whose exact
    scores it gives (its ``ground_truth(videos, prompts)``), reported beside the training reward."""
    if ground_truth_for is not None:
        GROUND_TRUTH[ground_truth_for] = name
    return REWARDS.register(name)


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
    return REWARDS.get(GROUND_TRUTH[prompt_set])()


def load(name: str, **kw: Any) -> Any:
    """Build the reward registered as ``name``; keyword arguments go to its factory."""
    return REWARDS.get(name)(**kw)


def names() -> list[str]:
    return REWARDS.names()
