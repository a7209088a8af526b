"""Who takes the whole run config (issue #42 item 1): at most ``CEILING`` functions of grpo_bench/ and methods/, all
in config assembly, identity, the CLI and the trainer's setup; every other builder receives its own typed section
(config/sections.py ``section``). A function takes the whole config when a parameter is annotated ``RunConfig``,
or is named like one (``cfg``, ``config``, ``run_config``) and is untyped or typed ``Any`` / ``object``; no
parameter is typed ``cfg: Any`` at all (a library's config gets its real type or a precise name)."""

from __future__ import annotations

import ast
from pathlib import Path

from support_paths import ROOT

CEILING = 15
ALLOWED = ("grpo_bench/config/run.py", "grpo_bench/config/sections.py", "grpo_bench/config/identity.py",
           "grpo_bench/cli/", "grpo_bench/train/trainer.py")
"""Config assembly (parsing, validation, ``resolve``, ``section``), identity (cell ids), the CLI, the trainer's
setup."""
CONFIG_NAMES = ("cfg", "config", "run_config")
LOOSE = ("Any", "typing.Any", "object")


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = node.args
    return a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]


def _annotation(arg: ast.arg) -> str | None:
    return None if arg.annotation is None else ast.unparse(arg.annotation).strip("'\"")


def takes_whole_config(arg: ast.arg) -> bool:
    text = _annotation(arg)
    if text is not None and "RunConfig" in text:
        return True
    return arg.arg in CONFIG_NAMES and (text is None or text in LOOSE)


def loose_config(arg: ast.arg) -> bool:
    """``cfg: Any`` (or ``config: Any``): the whole config or a library's, untold."""
    return arg.arg in CONFIG_NAMES and _annotation(arg) in ("Any", "typing.Any")


def scan(root: Path = ROOT, source: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(functions taking the whole config, parameters typed ``cfg: Any``), each as 'path:line name'."""
    if source is None:
        files = sorted(p for top in ("grpo_bench", "methods") for p in (root / top).rglob("*.py"))
        source = {p.relative_to(root).as_posix(): p.read_text() for p in files}
    whole, loose = [], []
    for path, text in source.items():
        for node in ast.walk(ast.parse(text, path)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = _parameters(node)
            if any(takes_whole_config(a) for a in params):
                whole.append(f"{path}:{node.lineno} {node.name}")
            loose += [f"{path}:{node.lineno} {node.name}({a.arg})" for a in params if loose_config(a)]
    return whole, loose


def test_the_counter_sees_each_form():
    """Independent of the repository: each form of a whole-config parameter is counted once, a section is not."""
    code = "\n".join([
        "def a(cfg: RunConfig): ...",
        "def b(x, cfg): ...",
        "def c(config: Any): ...",
        "def d(cfg: 'RunConfig | dict[str, Any]'): ...",
        "class K:\n    def e(self, *, run_config: object): ...",
        "def f(cfg: TrustRegion): ...",
        "def g(options: Compared, config: Qwen2VLConfig): ...",
    ])
    whole, loose = scan(source={"m.py": code})
    assert [w.split()[1] for w in whole] == ["a", "b", "c", "d", "e"]
    assert [x.split()[1] for x in loose] == ["c(config)"]


def test_no_parameter_is_typed_cfg_any():
    _, loose = scan()
    assert loose == [], "give each a section, its real type or a precise name:\n" + "\n".join(loose)


def test_at_most_fifteen_functions_take_the_whole_config_all_in_allowed_modules():
    """10 today, all in the allowed modules: the planner takes its ``PlanInputs`` section (plan/inputs.py) and the
    model's ``ModelSection``, built by the commands from the run config (cli/plan.py, cli/train_memory.py,
    cli/train_cost.py)."""
    whole, _ = scan()
    outside = [w for w in whole if not w.startswith(ALLOWED)]
    assert outside == [], "give these their own section:\n" + "\n".join(outside)
    assert len(whole) <= CEILING, f"{len(whole)} > {CEILING}:\n" + "\n".join(whole)
