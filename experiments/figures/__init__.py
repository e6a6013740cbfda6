"""The figures of the study, one module each, run by ``dcpsim figures``.

Each module defines ``KEY`` (a letter), ``STEM`` (the file name without extension), ``TITLE``,
``DEFAULT_SCENARIOS`` (the shipped scenarios it uses when none is given) and
``make(ctx, scenarios) -> list[Path]``, which writes ``STEM``.png, .pdf and .csv into ``ctx.out_dir``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.figures import (
    bubbles,
    efficiency,
    gantt,
    scaling,
    scheduling,
    skew,
    stragglers,
    throughput,
)
from dcpsim.experiments.figures.common import FigureContext
from dcpsim.experiments.scenario.definition import Scenario

FIGURES: dict[str, ModuleType] = {m.KEY: m for m in (throughput, bubbles, skew, scheduling, gantt, scaling,
                                                      efficiency, stragglers)}


def select(only: str | None) -> list[ModuleType]:
    """The figure modules named by ``--only a,c`` (letters or stems), in letter order; all if None."""
    if not only:
        return list(FIGURES.values())
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    out = []
    for w in wanted:
        mod = FIGURES.get(w) or next((m for m in FIGURES.values() if m.STEM == w), None)
        if mod is None:
            raise ScenarioError(f"unknown figure {w!r} in --only; valid: "
                                + ", ".join(f"{k} ({m.TITLE})" for k, m in FIGURES.items()))
        out.append(mod)
    return sorted(set(out), key=lambda m: m.KEY)


def make_figures(out_dir: str | Path, scenarios: Sequence[Scenario] | None = None, only: str | None = None,
                 quick: bool = False, policies: Sequence[str] | None = None,
                 ctx: FigureContext | None = None) -> dict[str, list[Path]]:
    """Write the selected figures into ``out_dir``; return the files of each.

    ``scenarios``: when given, every figure uses them (the first one as its base; figure b shows all);
    otherwise each figure uses its own ``DEFAULT_SCENARIOS`` from ``experiments/scenarios``. ``policies``
    (labels such as ``"mcore-dcp:cp_engine=hybrid"``) replaces the scenarios' policies.
    """
    from dcpsim.experiments.scenario.files import load_scenario

    ctx = ctx or FigureContext(Path(out_dir), quick=quick)
    out: dict[str, list[Path]] = {}
    for mod in select(only):
        scs = list(scenarios) if scenarios else [load_scenario(n) for n in mod.DEFAULT_SCENARIOS]
        if policies:
            scs = [s.with_(policies=tuple(policies)) for s in scs]
        ctx.log(f"figure ({mod.KEY}) {mod.TITLE}: {', '.join(s.name for s in scs)}")
        out[mod.KEY] = mod.make(ctx, scs)
    return out
