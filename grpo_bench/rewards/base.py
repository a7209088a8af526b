"""The reward protocol (``Reward``), what its factory declares, and the composite reward (docs/design.md §1, §5).

A reward is an instance of a ``Reward`` subclass, called as ``reward(videos, prompts) -> {"vq": Tensor[B], ...}``
(videos Tensor[B, 3, F, H, W] in [-1, 1]); it runs under no_grad and never trains. Everything else it declares
is a class attribute of ``Reward`` with a default, which a subclass overrides where it differs (the class's
docstrings say what each means); ``declaration`` reads them for a built reward, ``check_declarations`` checks a
class's before it is registered.

A registered factory (``rewards.register``: a ``Reward`` subclass, or a function whose return annotation names
one) declares, in its ``register`` call, what can be checked before anything is loaded (``FactoryDeclaration``,
read by ``factory_declaration``):

    path_options  option -> FILE or FOLDER, in the order ``reward_path``, ``reward_base_path`` fill them
                  (``{"checkpoint": FILE}``: ``reward_path`` must be a file); config/weights.py checks each path
    model_weights RewardModelWeights: the parameters it loads and their dtype on a GPU and on the CPU
                  (``grpo-bench plan`` counts them from the load on); None: negligible (the world's rewards)
    compute       what one forward costs (rewards/compute.py: ``forward(frames) -> Forward``), FLOPs from its
                  official config or counted on its own network, read by ``grpo-bench plan``; every registered
                  reward declares one (``NoNetwork(why)`` when it runs none; tests/rewards/test_reward_compute.py)

and, read from the class it builds (its ``product``), the media it scores (``modality``).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import FunctionType
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
MODALITIES = ("video", "image", "any")


class Reward(ABC):
    """What every reward is: a call that scores videos, and class-level declarations with defaults.

    A subclass implements ``__call__`` and overrides the declarations that differ; a reward with exact scores
    sets ``has_ground_truth = True`` and implements ``ground_truth``. Registration refuses a class whose
    declarations are malformed (``check_declarations``), in one line."""

    dimensions: tuple[str, ...] = DEFAULT_DIMENSIONS
    """The score names ``__call__`` returns (it may return more; these are the ones a setting weighs)."""
    settings: Mapping[str, Mapping[str, float]] | None = None
    """Its own setting -> {dimension: weight} table (a single-score reward weighs its one score 1 in A and B);
    None: the VQ/MQ/TA settings (``SETTINGS``)."""
    modality: str = "any"
    """The media it scores: 'video' (frames in time; a model of stills is refused), 'image' (one still per
    sample; a video model is refused), 'any' (every frame it is given; a still is a one-frame clip)."""
    video_shape: tuple[int, int, int, int] | None = None
    """(3, F, H, W) of the videos it scores (a property where the loaded weights fix it), checked against the
    model's before any sampling; None: any shape."""
    media_size: int | tuple[int, int] | None = None
    """The one frame size it reads, an int (square) or (height, width) (an embedded world's checker); None: any.
    The generic contract tests feed it frames of this size."""
    example_prompts: tuple[str, ...] | None = None
    """Prompts of the form it scores (a quoted word for OCR, an embedded world's grammar); None: any prompt of
    the video world's kind. The generic contract tests feed it these."""
    differentiable: bool = False
    """Its scores carry a gradient back to the videos when called with autograd on (a reward a method could
    back-propagate through); every shipped reward scores under no_grad."""
    has_ground_truth: bool = False
    """It gives exact scores for evaluation (``ground_truth``); such a reward registers as a prompt set's oracle
    (``register(name, ground_truth_for=prompt_set)``)."""

    @abstractmethod
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        """{dimension: Tensor[B]} for videos Tensor[B, 3, F, H, W] in [-1, 1] and one prompt per video."""

    def ground_truth(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        """Every exact column evaluation reports (``eval_oracle``): only a reward with ``has_ground_truth``."""
        raise NotImplementedError(f"reward {type(self).__name__} declares no ground truth (has_ground_truth)")


def _positive_ints(value: object, n: int) -> bool:
    return (isinstance(value, tuple) and len(value) == n
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value))


def check_declarations(cls: type) -> list[str]:
    """What is wrong with a reward class's declarations (empty when nothing): each a short phrase."""
    if not (isinstance(cls, type) and issubclass(cls, Reward)):
        return [f"{cls!r} is not a Reward subclass"]
    problems = []
    dims = cls.dimensions
    if not (isinstance(dims, tuple) and dims and all(isinstance(d, str) and d for d in dims)):
        problems.append(f"dimensions must be a non-empty tuple of names, not {dims!r}")
    elif cls.settings is not None:
        if not isinstance(cls.settings, Mapping) or not cls.settings:
            problems.append(f"settings must be None or a non-empty mapping, not {cls.settings!r}")
        else:
            for setting, weights in cls.settings.items():
                if not isinstance(weights, Mapping) or not weights or not set(weights) <= set(dims) or not all(
                        isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights.values()):
                    problems.append(f"settings[{setting!r}] must weigh some of {list(dims)} by numbers, "
                                    f"not {weights!r}")
    if cls.modality not in MODALITIES:
        problems.append(f"modality must be one of {', '.join(MODALITIES)}, not {cls.modality!r}")
    shape = cls.video_shape
    if not (shape is None or isinstance(shape, property) or (_positive_ints(shape, 4) and shape[0] == 3)):
        problems.append(f"video_shape must be None or (3, F, H, W) of positive ints, not {shape!r}")
    size = cls.media_size
    if not (size is None or _positive_ints(size, 2) or _positive_ints((size,), 1)):
        problems.append(f"media_size must be None, an int or (height, width), not {size!r}")
    prompts = cls.example_prompts
    if not (prompts is None or (isinstance(prompts, tuple) and prompts
                                and all(isinstance(p, str) and p.strip() for p in prompts))):
        problems.append(f"example_prompts must be None or a non-empty tuple of prompts, not {prompts!r}")
    if not all(isinstance(flag, bool) for flag in (cls.differentiable, cls.has_ground_truth)):
        problems.append("differentiable and has_ground_truth must be True or False")
    if cls.has_ground_truth != (cls.ground_truth is not Reward.ground_truth):
        problems.append("has_ground_truth must be True exactly when the class implements ground_truth")
    return problems


@dataclass(frozen=True)
class RewardDeclaration:
    """What a built reward declares besides its call (``Reward``'s class attributes, as this instance has them)."""

    dimensions: tuple[str, ...]
    settings: Mapping[str, Mapping[str, float]] | None
    video_shape: tuple[int, ...] | None
    has_ground_truth: bool
    modality: str = "any"
    differentiable: bool = False


def declaration(reward: Reward) -> RewardDeclaration:
    """The reward's declarations, read from the instance (a ``video_shape`` may depend on its weights)."""
    if not isinstance(reward, Reward):
        raise TypeError(f"a reward must be an instance of grpo_bench.api.Reward (subclass it and declare what "
                        f"differs from its defaults), got {type(reward).__name__}")
    shape = reward.video_shape
    return RewardDeclaration(dimensions=tuple(reward.dimensions), settings=reward.settings or None,
                             video_shape=None if shape is None else tuple(shape),
                             has_ground_truth=reward.has_ground_truth, modality=reward.modality,
                             differentiable=reward.differentiable)


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
    """What a registered reward's factory declares (the module docstring): made once, by ``register``."""

    product: type[Reward]
    """The class it builds (the factory itself when the factory is a class)."""
    path_options: Mapping[str, str]
    model_weights: RewardModelWeights | None
    compute: Any = None

    @property
    def modality(self) -> str:
        return self.product.modality


_FACTORIES: dict[Any, FactoryDeclaration] = {}
"""Registered factory -> its declaration (``declare_factory``, called by ``rewards.register``)."""


def product_class(factory: Any) -> type[Reward] | None:
    """The ``Reward`` subclass a factory builds: the factory itself when it is one, else the class its return
    annotation names (a class, or under postponed annotations the name of one in the factory's module); None
    when neither is a ``Reward`` subclass."""
    if isinstance(factory, type):
        product = factory
    elif isinstance(factory, FunctionType):
        hint = inspect.get_annotations(factory).get("return")
        product = factory.__globals__.get(hint) if isinstance(hint, str) else hint
    else:  # a partial or another callable object: nothing says what it builds
        product = None
    return product if isinstance(product, type) and issubclass(product, Reward) else None


def declare_factory(name: str, factory: Any, path_options: Mapping[str, str] | Iterable[str] = (),
                    model_weights: RewardModelWeights | None = None, compute: Any = None) -> FactoryDeclaration:
    """Record what the factory registered as ``name`` declares; a ValueError (one line, for ``register``) when
    it builds no ``Reward`` or its declarations are malformed. A plain sequence of path options (a plug-in that
    names no kinds) accepts a file or a folder for each."""
    product = product_class(factory)
    where = f"reward {name!r}"
    if product is None:
        raise ValueError(f"{where}: its factory {_named(factory)} must be a grpo_bench.api.Reward subclass or "
                         "a function whose return annotation names one (def make(...) -> MyReward); "
                         f"it declares {_annotation(factory)}")
    problems = check_declarations(product)
    if problems:
        raise ValueError(f"{where}: class {product.__qualname__}: {'; '.join(problems)}")
    kinds = dict(path_options) if isinstance(path_options, Mapping) else dict.fromkeys(path_options, FILE_OR_FOLDER)
    bad = {k: v for k, v in kinds.items() if v not in PATH_KINDS}
    if bad:
        raise ValueError(f"{where}: path option kinds {bad}; allowed: {', '.join(PATH_KINDS)}")
    if model_weights is not None and not isinstance(model_weights, RewardModelWeights):
        raise ValueError(f"{where}: model_weights must be a RewardModelWeights or None, not {model_weights!r}")
    made = FactoryDeclaration(product=product, path_options=kinds, model_weights=model_weights, compute=compute)
    _FACTORIES[factory] = made
    return made


def _named(factory: Any) -> str:
    return f"{type(factory).__name__} {factory!r}"[:120]


def _annotation(factory: Any) -> str:
    if isinstance(factory, FunctionType):
        hint = inspect.get_annotations(factory).get("return")
        return "no return annotation" if hint is None else f"return annotation {hint!r}"
    return "nothing it builds"


def factory_declaration(factory: Any) -> FactoryDeclaration:
    """The declaration ``register`` recorded for a registered reward factory (``REWARDS.get(name)``)."""
    if factory not in _FACTORIES:
        raise ValueError(f"{_named(factory)} is not a registered reward factory "
                         "(register it with grpo_bench.api.register_reward)")
    return _FACTORIES[factory]


def reward_weights(reward: Reward, setting: str) -> Mapping[str, float]:
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
