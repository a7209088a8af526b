"""Name → class registries, and the one plug-in loader every registry runs before answering.

New methods, kernels, KL variants, anchor policies, log-prob forms, rewards and models register
here; the core looks them up by name and never branches on names itself.

Before any lookup or listing, every registry loads the plug-ins (``load_plugins``), so every
command sees the same names whatever was imported first:

1. the modules of ``grpo_bench.methods`` (the shipped methods, one file each);
2. the entry-point group ``grpo_bench.plugins`` of installed packages
   (``[project.entry-points."grpo_bench.plugins"] my_method = "my_pkg.my_method"``);
3. ``GRPO_BENCH_PLUGINS``: module names or ``.py`` file paths separated by ``os.pathsep``
   (":" on Linux), for a method file that is not installed as a package.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Generic, TypeVar

from grpo_bench.errors import UserError, unknown

T = TypeVar("T")

PLUGIN_GROUP = "grpo_bench.plugins"
PLUGIN_ENV = "GRPO_BENCH_PLUGINS"
METHODS_PACKAGE = "grpo_bench.methods"


class _PluginState:
    loading = False
    entry_points_loaded = False
    methods_loaded = False
    loaded: set[str] = set()  # GRPO_BENCH_PLUGINS entries already imported


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=PLUGIN_GROUP))


def _import_entry(entry: str) -> None:
    """Import one GRPO_BENCH_PLUGINS entry: a ``.py`` file path or a module name."""
    if entry.endswith(".py"):
        path = Path(entry).expanduser()
        if not path.is_file():
            raise UserError(f"{PLUGIN_ENV}: plug-in file {entry!r} does not exist")
        module_name = f"grpo_bench_plugin_{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    else:
        importlib.import_module(entry)


def load_plugins() -> None:
    """Import the shipped methods, installed plug-ins and GRPO_BENCH_PLUGINS entries (idempotent).

    A lookup made while a plug-in module is being imported (re-entrant) sees what is registered so far."""
    if _PluginState.loading:
        return
    _PluginState.loading = True
    try:
        if not _PluginState.methods_loaded:
            _PluginState.methods_loaded = True
            pkg = importlib.import_module(METHODS_PACKAGE)
            for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
                if not info.name.startswith("_"):
                    importlib.import_module(f"{METHODS_PACKAGE}.{info.name}")
        if not _PluginState.entry_points_loaded:
            _PluginState.entry_points_loaded = True
            for ep in _entry_points():
                try:
                    ep.load()
                except UserError:
                    raise
                except Exception as exc:
                    raise UserError(f"plug-in {ep.name!r} ({ep.value}, entry point group {PLUGIN_GROUP!r}) "
                                    f"failed to import: {type(exc).__name__}: {exc}") from None
        for entry in filter(None, (e.strip() for e in os.environ.get(PLUGIN_ENV, "").split(os.pathsep))):
            if entry in _PluginState.loaded:
                continue
            _PluginState.loaded.add(entry)
            try:
                _import_entry(entry)
            except UserError:
                raise
            except Exception as exc:
                _PluginState.loaded.discard(entry)
                raise UserError(
                    f"{PLUGIN_ENV}: plug-in {entry!r} failed to import: {type(exc).__name__}: {exc}"
                ) from None
    finally:
        _PluginState.loading = False


class Registry(Generic[T]):
    """A named collection of classes (or factories) of one kind; plug-ins load before any lookup."""

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

    def unregister(self, name: str) -> None:
        """Remove an entry (tests that register temporary plug-ins clean up with this)."""
        self._entries.pop(name, None)

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
        load_plugins()


class LazyRegistry(Registry[T]):
    """A registry that also imports, on first lookup, the modules that fill it: every module of a
    ``package`` (rewards/, models/) and/or the named ``modules`` (the report's tables and figures).
    The registry never imports its members statically, so they may import it without a cycle."""

    def __init__(self, kind: str, package: str | None = None, modules: tuple[str, ...] = ()) -> None:
        super().__init__(kind)
        self._package, self._modules = package, modules
        self._loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            names = list(self._modules)
            if self._package is not None:
                pkg = importlib.import_module(self._package)
                infos = sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)
                names += [f"{self._package}.{i.name}" for i in infos if not i.name.startswith("_")]
            for name in names:
                importlib.import_module(name)
        load_plugins()


PROMPT_SETS: Registry = Registry("prompt set")
"""Named prompt sets a world ships beside the built-in 'world' (config/prompts.py): ``factory() -> (train, eval)``
lists of prompts, registered by the world's plug-in (``@PROMPT_SETS.register(name)``)."""
