"""The import table of docs/architecture.md (§ "The import table"), checked on the source: no module imports a
package above its own, no two modules import each other (directly or around a circle, function-level imports
included), and the batch type is defined once. An AST walk, no imports executed."""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> what it may import at run time (docs/architecture.md); type-only imports may also name traces.
MAY_IMPORT = {
    "cost_models": set(),
    "traces": set(),
    "policies": {"cost_models", "traces"},
    "sim": {"policies", "cost_models", "traces"},
    "real_runtime": {"policies", "cost_models", "traces", "sim"},
    "experiments": {"cost_models", "traces", "policies", "sim", "real_runtime"},
}
# Modules below every package (src/dcpsim/<name>.py): all may import them; they import nothing of the project.
BOTTOM_MODULES = {"userfile"}  # reading a user's file safely (docs/architecture.md)
REAL_RUNTIME_SIM = {"dcpsim.sim.timeline", "dcpsim.sim.metrics", "dcpsim.sim.metric_spec"}  # not the engine


def project_imports(path: Path) -> list[tuple[str, bool]]:
    """(module, type_only) for every ``dcpsim.*`` import of a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        out += [(n, id(node) in type_only) for n in names if n.startswith("dcpsim.")]
    return out


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_point_down_the_table(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module, type_only in project_imports(path):
            target = module.split(".")[1]
            if target in (package, "__version__") or target not in MAY_IMPORT:
                continue
            if target not in MAY_IMPORT[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
            elif package == "real_runtime" and target == "sim" and not type_only and \
                    not any(module == m or module.startswith(m + ".") for m in REAL_RUNTIME_SIM):
                bad.append(f"{path.relative_to(ROOT)} imports {module} (real_runtime may use sim.timeline and "
                           "sim.metrics only)")
    assert not bad, "\n".join(bad)


def test_bottom_modules_import_nothing_of_the_project() -> None:
    for name in sorted(BOTTOM_MODULES):
        imports = project_imports(ROOT / "src" / "dcpsim" / f"{name}.py")
        assert imports == [], f"dcpsim.{name} imports {imports}"


def test_one_batch_type() -> None:
    """``traces.batching.GlobalBatch`` is the only batch class (``cost_models.base.GroupBatch`` is the cost
    model's flattened CP groups, not a batch of sequences)."""
    found = []
    for package in [*MAY_IMPORT, "tests"]:
        for path in sorted((ROOT / package).rglob("*.py")):
            for m in re.finditer(r"^\s*class (\w*Batch)\b", path.read_text(encoding="utf-8"), re.M):
                found.append((str(path.relative_to(ROOT)), m.group(1)))
    assert sorted(found) == [("cost_models/base.py", "GroupBatch"), ("traces/batching.py", "GlobalBatch")]


# ---- import cycles -----------------------------------------------------------------------------------------
PACKAGE_DIRS = {"dcpsim": ROOT / "src" / "dcpsim", **{f"dcpsim.{p}": ROOT / p for p in MAY_IMPORT}}


def module_files(package_dirs: dict[str, Path]) -> dict[str, Path]:
    """Every module of the package by dotted name (``pkg/__init__.py`` is ``pkg``), from pyproject's
    package-dir."""
    out: dict[str, Path] = {}
    for prefix, folder in package_dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([prefix, *parts])] = path
    return out


def _type_only_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return ids


def module_imports(name: str, path: Path, modules: Iterable[str]) -> dict[str, int]:
    """The modules of ``modules`` that module ``name`` (file ``path``) imports at run time, each with the line
    of its first import: every ``import`` / ``from … import`` anywhere in the file (inside functions too),
    relative ones resolved, except those under ``if TYPE_CHECKING:``. ``from pkg import sub`` names the module
    ``pkg.sub`` where it exists, else ``pkg``. A parent package that Python runs first is not counted: an edge
    is the module an import statement names."""
    known = set(modules)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = _type_only_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            if t in known and t != name:
                out.setdefault(t, node.lineno)
    return out


def import_cycles(graph: dict[str, dict[str, int]]) -> list[tuple[list[str], list[str]]]:
    """Per strongly connected component of more than one module (Tarjan's algorithm, run iteratively): a
    shortest cycle ``[a, b, …, a]`` from the component's first module by name, and the component's modules
    (sorted); sorted by cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        components.append(sorted(comp))
    cycles = []
    for comp in components:
        inside, start = set(comp), comp[0]
        parent: dict[str, str] = {}
        queue = deque([start])
        while queue:  # breadth first from start, within the component, back to start
            v = queue.popleft()
            if start in graph[v]:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                cycles.append(([start, *reversed(path[:-1]), start], comp))
                break
            for w in sorted(graph[v]):
                if w in inside and w not in parent and w != start:
                    parent[w] = v
                    queue.append(w)
    return sorted(cycles)


def describe_cycle(cycle: list[str], graph: dict[str, dict[str, int]], files: dict[str, Path],
                   component: list[str] | None = None) -> str:
    """``a → b (a.py:12) → a (b.py:40)``: each step with the file and line of the import that makes it; with
    ``component`` (when the circle is only part of it), the line after it names every module tied in."""
    steps = [cycle[0]] + [f"{b} ({files[a].relative_to(ROOT) if files[a].is_relative_to(ROOT) else files[a]}"
                          f":{graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
    text = " → ".join(steps)
    if component and len(component) > len(cycle) - 1:
        text += f"\n    ({len(component)} modules tied in one circle: {', '.join(component)})"
    return text


def cycle_report(package_dirs: dict[str, Path]) -> list[str]:
    files = module_files(package_dirs)
    graph = {m: module_imports(m, p, files) for m, p in files.items()}
    return [describe_cycle(cycle, graph, files, comp) for cycle, comp in import_cycles(graph)]


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")


def test_cycle_finder_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    _write(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import x\n",
        "b.py": "def f():\n    from . import c\n",  # function-level, relative: b -> pkg.c
        "c.py": "import pkg.a\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
        "e.py": "from pkg.d import y\n",
    })
    files = module_files({"pkg": tmp_path})
    graph = {m: module_imports(m, p, files) for m, p in files.items()}
    assert graph["pkg.b"] == {"pkg.c": 2} and graph["pkg.d"] == {} and graph["pkg.e"] == {"pkg.d": 1}
    assert import_cycles(graph) == [(["pkg.a", "pkg.b", "pkg.c", "pkg.a"], ["pkg.a", "pkg.b", "pkg.c"])]
    text = describe_cycle(["pkg.a", "pkg.b", "pkg.c", "pkg.a"], graph, files)
    assert text.startswith("pkg.a → pkg.b (") and text.endswith("c.py:1)")


def test_cycle_finder_passes_a_tree_without_cycles(tmp_path: Path) -> None:
    _write(tmp_path, {"__init__.py": "from pkg.a import x\n", "a.py": "from .b import y\n",
                      "b.py": "import os\n"})
    assert cycle_report({"pkg": tmp_path}) == []


def test_no_import_cycles() -> None:
    """No module reaches itself through run-time imports (function-level ones included): each circle found is
    printed as a chain with the file and line of every import in it."""
    cycles = cycle_report(PACKAGE_DIRS)
    assert not cycles, f"{len(cycles)} import circle(s):\n" + "\n".join(cycles)
