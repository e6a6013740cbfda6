"""The default comparison's numbers are pinned: refactors must not move them.

``tests/data/compare_default_v0_1_0.json`` is ``dcpsim compare --json`` as printed before the package was
renamed (tests/data/SOURCES.md). With every cost-model term added since switched off (``--cost-terms legacy``),
every key of that file must come back with exactly the same value; keys added later are allowed.
"""

from __future__ import annotations

import json
from pathlib import Path

from dcpsim.experiments.cli import main

PINNED = Path(__file__).parent.parent / "data" / "compare_default_v0_1_0.json"


def _subset_equal(pinned, now, path="") -> list[str]:
    if isinstance(pinned, dict):
        out = []
        for k, v in pinned.items():
            if k not in now:
                out.append(f"{path}.{k} missing")
            else:
                out += _subset_equal(v, now[k], f"{path}.{k}")
        return out
    if isinstance(pinned, list):
        if len(pinned) != len(now):
            return [f"{path}: {len(now)} items, pinned {len(pinned)}"]
        return [e for i, (a, b) in enumerate(zip(pinned, now)) for e in _subset_equal(a, b, f"{path}[{i}]")]
    return [] if pinned == now else [f"{path}: {now!r} != pinned {pinned!r}"]


def test_default_compare_json_reproduces_the_pinned_numbers(capsys):
    assert main(["compare", "--json", "--cost-terms", "legacy", "--no-progress"]) == 0
    now = json.loads(capsys.readouterr().out)
    pinned = json.loads(PINNED.read_text())
    assert len(pinned["results"]) == 3
    assert _subset_equal(pinned, now) == []
