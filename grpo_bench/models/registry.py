"""The generator-model registry (its own module so that adapters register without importing the
package's loading helpers, which import the adapters: no cycle)."""

from __future__ import annotations

from typing import Any

from grpo_bench.registry import LazyRegistry

MODELS: LazyRegistry = LazyRegistry("generator model", "grpo_bench.models")


def register(name: str) -> Any:
    """Decorator registering a model factory ``factory(pretrained: bool = True, **kw)`` under ``name``."""
    return MODELS.register(name)
