"""Generator models behind one protocol (models/base.py), looked up by name.

A model module registers a factory
``factory(pretrained: bool = True, section: ModelSection | None = None, **kw) -> VideoModel`` with
``@MODELS.register("name")``; the registry imports this package's modules on first lookup, so
a new adapter only needs a new file here (import heavy libraries inside the factory). ``section``
(models/options.py) is all a factory reads of a run: a run config's is ``section(cfg, ModelSection)``
(config/sections.py); None when a model is built outside a run.

    load("world")                      # the shipped pretrained world model
    build("world", size=16)            # a randomly initialised one (tests)
    from_section(section(cfg, ModelSection))   # the generator a run config names
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_bench.models.options import ModelSection
from grpo_bench.models.registry import MODELS, register

__all__ = ["MODELS", "ModelSection", "build", "from_section", "load", "modality", "names", "register"]


def load(name: str, **kw: Any) -> Any:
    """The pretrained model registered as ``name`` (keyword arguments go to its factory).

    A name that is not registered but looks like a hub id ("org/model") or an existing folder
    loads a diffusers pipeline from local files (models/diffusers_registry.py: never downloads)."""
    if name not in MODELS and ("/" in name or Path(name).expanduser().exists()):
        from grpo_bench.models.diffusers_registry import load_any

        return load_any(name, **kw)
    return MODELS.get(name)(pretrained=True, **kw)


def from_section(section: ModelSection) -> Any:
    """The pretrained generator a run's model section names (``section.model``), set up as it says: the
    factory reads what it needs of it (the world model its video size; diffusers models frames, size,
    LoRA, checkpointing, precision, device)."""
    return load(section.model, section=section)


def build(name: str, pretrained: bool = False, **kw: Any) -> Any:
    """A model registered as ``name``, randomly initialised unless ``pretrained``."""
    return MODELS.get(name)(pretrained=pretrained, **kw)


def names() -> list[str]:
    return MODELS.names()


def modality(name: str) -> str | None:
    """'image' (a still-image generator: one-frame clips) or 'video' for a registered name, a local
    pipeline folder or a cached hub id, without building the model; None when it cannot be told."""
    if name in MODELS:
        return MODELS.modality(name)
    from grpo_bench.models.diffusers_registry import pipeline_modality

    return pipeline_modality(name)
