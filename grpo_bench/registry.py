"""Name → class registries. New methods, kernels, KL variants and rewards register here;
the core looks them up by name and never branches on names itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from grpo_bench.errors import unknown

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of classes (or factories) of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            obj.name = name
            return obj

        return decorator

    def get(self, name: str, where: str = "") -> T:
        self._load()
        if name not in self._entries:
            raise unknown(self.kind, name, self._entries, where)
        return self._entries[name]

    def names(self) -> list[str]:
        self._load()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _load(self) -> None:
        """Hook for registries whose entries live in modules imported on first use."""


class LazyRegistry(Registry[T]):
    """A registry filled by importing a package's modules on first lookup (e.g. methods/)."""

    def __init__(self, kind: str, package: str) -> None:
        super().__init__(kind)
        self._package = package
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        import importlib
        import pkgutil

        pkg = importlib.import_module(self._package)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self._package}.{info.name}")
