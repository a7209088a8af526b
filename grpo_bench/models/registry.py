"""The generator-model registry (its own module so that adapters register without importing the
package's loading helpers, which import the adapters: no cycle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_bench.registry import LazyRegistry

MODALITIES = ("video", "image")


class ModelRegistry(LazyRegistry[Any]):
    """Model factories by name, each with the modality it declares when it registers ('video' unless it says
    'image'), readable without building the model (``modality``)."""

    def __init__(self, kind: str, package: str | None = None) -> None:
        super().__init__(kind, package)
        self._modality: dict[str, str] = {}

    def register(self, name: str, modality: str = "video") -> Callable[[Any], Any]:
        if modality not in MODALITIES:  # a programming error of the adapter, not the user's input
            raise ValueError(f"{self.kind} {name!r}: modality {modality!r}; allowed: {', '.join(MODALITIES)}")
        add = super().register(name)

        def decorator(factory: Any) -> Any:
            add(factory)
            self._modality[name] = modality
            return factory

        return decorator

    def modality(self, name: str) -> str:
        """The modality the factory registered as ``name`` declared (UserError for an unknown name)."""
        self.get(name)
        return self._modality[name]


MODELS: ModelRegistry = ModelRegistry("generator model", "grpo_bench.models")


def register(name: str, modality: str = "video") -> Callable[[Any], Any]:
    """Decorator registering a model factory ``factory(pretrained: bool = True, section=None, **kw)`` under
    ``name`` (``section``: the run's models/options.py ``ModelSection``, or None outside a run);
    ``modality``: 'image' for a still-image generator (one-frame clips), else 'video'."""
    return MODELS.register(name, modality)
