"""The import table of docs/architecture.md (DESIGN §2), checked on the source: no module imports a package
above its own, and the batch type is defined once. An AST walk, no imports executed."""

from __future__ import annotations

import ast
import re
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


def test_one_batch_type() -> None:
    """``traces.batching.GlobalBatch`` is the only batch class (``cost_models.base.GroupBatch`` is the cost
    model's flattened CP groups, not a batch of sequences)."""
    found = []
    for package in [*MAY_IMPORT, "tests"]:
        for path in sorted((ROOT / package).rglob("*.py")):
            for m in re.finditer(r"^\s*class (\w*Batch)\b", path.read_text(encoding="utf-8"), re.M):
                found.append((str(path.relative_to(ROOT)), m.group(1)))
    assert sorted(found) == [("cost_models/base.py", "GroupBatch"), ("traces/batching.py", "GlobalBatch")]
