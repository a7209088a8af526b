"""The reward protocol and the composite reward (docs/design.md §5).

A reward is called as ``reward(videos, prompts) -> {"vq": Tensor[B], "mq": Tensor[B], "ta": Tensor[B]}``
(videos Tensor[B, 3, F, H, W] in [-1, 1]); it runs under no_grad and never trains. Besides the call it
declares (``RewardDeclaration``, read once by ``declaration``):

    dimensions    the score names it returns (default VQ, MQ, TA)
    settings      its own setting -> weights table (single-score rewards); None: the VQ/MQ/TA settings
    video_shape   (C, F, H, W) it scores; None: any
    ground_truth  optional ``ground_truth(videos, prompts)``: exact scores for evaluation; a reward that has
                  one registers as a prompt set's ground truth (``register(name, ground_truth_for="world")``)
    example_prompts  optional: prompts of the form it scores (a quoted word for OCR, an embedded world's grammar);
                  the generic contract tests feed it these (models declare the same)
    media_size    optional: the one image size it scores (an embedded world's checker)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_bench.errors import unknown

SETTINGS: dict[str, dict[str, float]] = {
    "A": {"vq": 1.0, "mq": 1.0, "ta": 1.0},
    "B": {"vq": 0.5, "mq": 0.5, "ta": 1.0},
}


def setting_weights(setting: str) -> dict[str, float]:
    if setting not in SETTINGS:
        raise unknown("setting", setting, SETTINGS)
    return SETTINGS[setting]


DEFAULT_DIMENSIONS = ("vq", "mq", "ta")


@dataclass(frozen=True)
class RewardDeclaration:
    """What a reward declares besides its call (the module docstring)."""

    dimensions: tuple[str, ...]
    settings: Mapping[str, Mapping[str, float]] | None
    video_shape: tuple[int, ...] | None
    has_ground_truth: bool


def declaration(reward: Any) -> RewardDeclaration:
    """The reward's declaration, its defaults filled in: the one place the optional parts are read."""
    dims, settings, shape = (getattr(reward, k, None) for k in ("dimensions", "settings", "video_shape"))
    return RewardDeclaration(
        dimensions=tuple(dims or DEFAULT_DIMENSIONS),
        settings=settings or None,
        video_shape=None if shape is None else tuple(shape),
        has_ground_truth=callable(getattr(reward, "ground_truth", None)),
    )


def reward_weights(reward: object, setting: str) -> dict[str, float]:
    """The weights of ``setting`` for this reward: its own ``settings`` table when it has one
    (single-score rewards such as CLIPScore and PickScore weight their one score 1 in A and B),
    else the VQ/MQ/TA settings above."""
    own = declaration(reward).settings
    if own:
        if setting not in own:
            raise unknown("setting", setting, own)
        return own[setting]
    return setting_weights(setting)


def composite(scores: dict[str, Tensor], setting: str | dict[str, float]) -> Tensor:
    """w_vq*VQ + w_mq*MQ + w_ta*TA: Tensor[B]. ``setting`` is 'A', 'B' or explicit weights."""
    weights = setting_weights(setting) if isinstance(setting, str) else setting
    missing = sorted(set(weights) - set(scores))
    if missing:
        raise KeyError(f"reward scores lack dimension(s) {missing}; have {sorted(scores)}")
    return torch.stack([w * scores[k].float() for k, w in weights.items()]).sum(0)


def refuse_mismatched_keys(what: str, source: object, missing: list[str] | set[str],
                           unexpected: list[str] | set[str]) -> None:
    """A reward checkpoint whose keys do not match its model stops the run, naming the keys: a missing
    weight would stay at its random initialisation and score nonsense without a word."""
    from grpo_bench.errors import UserError

    def named(keys: list[str] | set[str]) -> str:
        keys = sorted(keys)
        return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

    parts = ([f"{len(missing)} missing ({named(missing)})"] if missing else []) + (
        [f"{len(unexpected)} unexpected ({named(unexpected)})"] if unexpected else [])
    if parts:
        raise UserError(f"{what} {source}: the checkpoint does not match the model: {'; '.join(parts)} weights; "
                        "refusing to score with weights left at their random initialisation")
