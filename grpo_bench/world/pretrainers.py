"""Networks that plug-in worlds ship and can rebuild (`grpo-bench pretrain net NAME [ARGS...]`).

A world outside the core registers each of its pretraining entry points here by module name, so the command line
reaches them without the core naming the world; the module is imported only when its network is rebuilt, and its
``main(argv)`` parses the arguments after NAME itself (`grpo-bench pretrain net NAME -- --help` lists them).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from grpo_bench.registry import Registry


@dataclass
class Pretrainer:
    """One rebuildable network: ``module``'s ``main(argv)`` trains it and writes its weights and card."""

    module: str
    what: str
    """One line for the command's listing: which network, and what it is trained on."""

    def run(self, argv: list[str]) -> None:
        importlib.import_module(self.module).main(argv)


PRETRAINERS: Registry[Pretrainer] = Registry("pretrainer")
