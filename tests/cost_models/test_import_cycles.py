"""cost_models/ has no import circle between its modules, imports made inside functions included (an AST walk,
nothing imported; type-only imports under ``TYPE_CHECKING`` run nothing and are left out)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cost_models"


def module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = ("dcpsim",) + rel.parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at run time (module level or inside a function);
    ``from dcpsim.cost_models import moe`` counts as importing ``moe``."""
    paths = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for mod, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                     and "TYPE_CHECKING" in ast.unparse(node.test) for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                         for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[mod].update(n for n in names if n in paths and n != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_finder_sees_a_circle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_imports_inside_functions_and_not_type_only_ones(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from dcpsim.pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from dcpsim.pkg.c import g\n    return g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dcpsim.pkg import a\n"
                              "def g():\n    import dcpsim.pkg.a\n")
    graph = import_graph(pkg)
    assert graph == {"dcpsim.pkg": set(), "dcpsim.pkg.a": {"dcpsim.pkg.b"}, "dcpsim.pkg.b": {"dcpsim.pkg.c"},
                     "dcpsim.pkg.c": {"dcpsim.pkg.a"}}
    assert cycles(graph) == [["dcpsim.pkg.a", "dcpsim.pkg.b", "dcpsim.pkg.c"]]
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dcpsim.pkg import a\n")
    assert cycles(import_graph(pkg)) == []


def test_cost_models_has_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles in cost_models: " + "; ".join(" <-> ".join(c) for c in found)
