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
    media_size    optional: the one image size it scores, an int or (height, width) (an embedded world's checker)

Its registered factory declares, as attributes read once by ``factory_declaration`` before anything is loaded:

    path_options  option -> FILE or FOLDER, in the order ``reward_path``, ``reward_base_path`` fill them
                  (``{"checkpoint": FILE}``: ``reward_path`` must be a file); train/weights.py checks each path
    modality      'image' (stills), 'video' or 'any' (every frame; the default)
    model_weights RewardModelWeights: the parameters it loads and their dtype on a GPU and on the CPU
                  (``grpo-bench plan`` counts them from the load on); None: negligible (the world's rewards)
    compute       what one forward costs (rewards/compute.py: ``forward(frames) -> Forward``), FLOPs from its
                  official config or counted on its own network, read by ``grpo-bench plan``; every registered
                  reward declares one (``NoNetwork(why)`` when it runs none; tests/rewards/test_reward_compute.py)
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


FILE, FOLDER, FILE_OR_FOLDER = "file", "folder", "file or folder"
PATH_KINDS = (FILE, FOLDER, FILE_OR_FOLDER)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class RewardModelWeights:
    """The model a reward's factory loads: its parameter count and the dtype it holds them in on a GPU and on
    the CPU (the factory's own default: ``dtype(device)`` is what it loads when no dtype is passed)."""

    params: float
    gpu_dtype: str = "float32"
    cpu_dtype: str = "float32"

    def dtype(self, device: str) -> str:
        return self.gpu_dtype if str(device).startswith("cuda") else self.cpu_dtype

    def bytes(self, device: str) -> float:
        """Bytes of the loaded weights on ``device`` ('cuda...' or 'cpu')."""
        return self.params * DTYPE_BYTES[self.dtype(device)]


@dataclass(frozen=True)
class FactoryDeclaration:
    """What a registered reward's factory declares (the module docstring), its defaults filled in."""

    path_options: Mapping[str, str]
    modality: str
    model_weights: RewardModelWeights | None
    compute: Any = None


def factory_declaration(factory: Any) -> FactoryDeclaration:
    """The factory's declaration: the one place its optional attributes are read. A plain tuple of path
    options (a plug-in that names no kinds) accepts a file or a folder for each."""
    options = getattr(factory, "path_options", None) or {}
    kinds = dict(options) if isinstance(options, Mapping) else dict.fromkeys(options, FILE_OR_FOLDER)
    bad = {k: v for k, v in kinds.items() if v not in PATH_KINDS}
    if bad:  # a programming error of the reward module, not of the user's input
        raise ValueError(f"reward factory {getattr(factory, '__name__', factory)!r}: path option kinds {bad}; "
                         f"allowed: {', '.join(PATH_KINDS)}")
    return FactoryDeclaration(path_options=kinds, modality=str(getattr(factory, "modality", "any")),
                              model_weights=getattr(factory, "model_weights", None),
                              compute=getattr(factory, "compute", None))


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
