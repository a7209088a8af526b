"""No import cycles between grpo_bench modules (function-level and TYPE_CHECKING imports included: an
annotation-only import is still a dependency a reader must follow; so is ``importlib.import_module`` of a
literal grpo_bench name, which grimp cannot see). The layer contracts themselves are checked by
`lint-imports` (pyproject [tool.importlinter], run by CI)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

PACKAGE = Path(__file__).resolve().parents[2] / "grpo_bench"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _dynamic_imports(sources: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """(importer, imported) of every ``importlib.import_module("grpo_bench...")`` / ``__import__`` with a literal
    module name: an import all the same, only hidden from the import graph."""
    found = set()
    for module, tree in sources.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            target = node.args[0]
            if name in ("import_module", "__import__") and isinstance(target, ast.Constant) \
                    and isinstance(target.value, str) and target.value.startswith("grpo_bench"):
                found.add((module, target.value))
    return found


def _lazy_registry_members(sources: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """(registry module, member module) of every ``LazyRegistry(..., modules=...)``: the modules it imports
    on first lookup (by name, so that they may import the registry)."""
    found = set()
    for module, tree in sources.items():
        constants = {t.id: n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                     for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if not isinstance(node, ast.Call) or name != "LazyRegistry":
                continue
            for kw in node.keywords:
                if kw.arg == "modules":
                    value = constants.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
                    found |= {(module, member) for member in ast.literal_eval(value)}
    return found


def _graph():
    graph = grimp.build_graph("grpo_bench", exclude_type_checking_imports=False)
    for importer, imported in _dynamic_imports(_sources()):
        graph.add_import(importer=importer, imported=imported)
    return graph


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    graph = _graph()
    assert len(graph.modules) > 50  # the package was found
    assert _cycles(graph) == []


def test_a_lazy_registry_loads_only_its_own_package():
    """A registry may import its members by name (they import it back), but only within its own package:
    a registry in one layer reaching by name into another (the suite's report-part registry importing the
    report's parts did) is a cycle across layers that neither grimp nor lint-imports can see."""
    members = _lazy_registry_members(_sources())
    assert members  # the report's part registries were found
    outside = {(registry, member) for registry, member in members
               if member.rpartition(".")[0] != registry.rpartition(".")[0]}
    assert outside == set()


def test_dynamic_imports_are_found():
    tree = {"p.a": ast.parse('import importlib\nimportlib.import_module("grpo_bench.report.tables")\n'),
            "p.b": ast.parse('from grpo_bench.registry import LazyRegistry\nM = ("grpo_bench.x.y",)\n'
                             'R = LazyRegistry("r", modules=M)\n')}
    assert _dynamic_imports(tree) == {("p.a", "grpo_bench.report.tables")}
    assert _lazy_registry_members(tree) == {("p.b", "grpo_bench.x.y")}


def test_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == [["p.a", "p.b"]]
