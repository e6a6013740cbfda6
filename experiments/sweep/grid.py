"""A sweep file parsed and checked (:func:`load_sweep`) and expanded into its tasks (:meth:`Sweep.tasks`).

The file's format is described in :mod:`experiments.sweep.driver` and docs/experiments.md.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.scenario.definition import Scenario
from dcpsim.experiments.sweep.keys import code_version, point_files, task_key
from dcpsim.experiments.sweep.task import Task
from dcpsim.userfile import check_number

TOP_KEYS = {"base", "policies", "seeds", "grid", "set", "description"}
NOT_GRIDDABLE = {"name", "description", "policies", "seed"}
# The most tasks one sweep runs: the driver builds every task (its key hashed) before the first one runs and
# holds them all; 'python experiments/bench/sweep.py --tasks 99000 --keys-only' measured 8.98 s for 99,000 tasks,
# 0.091 ms and 0.89 KiB per task (2 shared cores, 2026-12-02), so 10^5 tasks is ~9 s and ~90 MiB before any
# work, 10^7 would be ~15 minutes and ~9 GiB: refused up front instead (and at about a second per run, 10^5
# runs are a day of one core: past it the file is more likely a mistake than a plan).
MAX_TASKS = 100_000

@dataclass(frozen=True)
class Sweep:
    """A parsed sweep file."""

    source: str
    base: Scenario
    grid: dict[str, list[Any]]
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    fixed: dict[str, Any] = field(default_factory=dict)

    @property
    def num_points(self) -> int:
        n = len(self.seeds)
        for v in self.grid.values():
            n *= len(v)
        return n

    @property
    def num_tasks(self) -> int:
        return self.num_points * len(self.policies)

    def definition(self) -> str:
        """sha256 (hex) of what defines the sweep: the base scenario's fields, [set], [grid], policies, seeds
        (not the file's text nor the contents of the files it names: those are in each task's key)."""
        import hashlib
        import json

        doc = {"base": _scenario_fields(self.base), "set": self.fixed, "grid": self.grid,
               "policies": list(self.policies), "seeds": list(self.seeds)}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()

    def tasks(self) -> list[Task]:
        """Every point × policy, points in grid order (the last grid field varies fastest, seeds last)."""
        out = []
        names = list(self.grid)
        base = self.base.with_(**self.fixed) if self.fixed else self.base
        code, cwd = code_version(), os.getcwd()
        digests: dict[str, str] = {}  # each named file hashed once per call
        for i, combo in enumerate(itertools.product(*self.grid.values(), self.seeds)):
            values = dict(zip(names + ["seed"], combo))
            sc = base.with_(**values, name=f"{self.base.name}#{i}")
            content = _scenario_fields(sc)
            files = point_files(content, digests)
            for pol in self.policies:
                key = task_key(content, pol, files, code)
                out.append(Task(key, i, values, pol, content, files, code, cwd))
        return out


def _scenario_fields(sc: Scenario) -> dict[str, Any]:
    d = sc.to_dict()
    d.pop("num_gpus", None)
    d["policies"] = list(sc.policies)
    return d


def load_sweep(path: str | Path) -> Sweep:
    """Parse and check a sweep file; every problem is a :class:`ScenarioError` naming the file and key."""
    from dcpsim.experiments.runner import parse_policy_specs
    from dcpsim.experiments.scenario.files import load_scenario, read_toml, scenario_from_mapping

    path = Path(path)
    data = read_toml(path, "sweep")
    bad = sorted(set(data) - TOP_KEYS)
    if bad:
        raise ScenarioError(f"{path}: unknown key {bad[0]!r}; valid: {', '.join(sorted(TOP_KEYS))}")
    base_ref = data.get("base", "default")
    if not isinstance(base_ref, str):
        raise ScenarioError(f"{path}: 'base' must be a scenario name or a .toml path, got {base_ref!r}")
    if base_ref.endswith(".toml") and not Path(base_ref).is_absolute():
        base_ref = str(path.parent / base_ref)
    base = load_scenario(base_ref)
    grid = data.get("grid", {})
    if not isinstance(grid, dict) or not grid:
        raise ScenarioError(f"{path}: a [grid] table of field = [values] is required")
    for k, vals in grid.items():
        if k in NOT_GRIDDABLE:
            hint = " (use 'seeds')" if k == "seed" else " (use 'policies')" if k == "policies" else ""
            raise ScenarioError(f"{path}: [grid] {k!r} cannot be swept{hint}")
        if not isinstance(vals, list) or not vals:
            raise ScenarioError(f"{path}: [grid] {k} must be a non-empty list of values, got {vals!r}")
        for v in vals:
            scenario_from_mapping({k: v}, f"{path} [grid]")  # unknown field / wrong type → ScenarioError
    fixed = data.get("set", {})
    if not isinstance(fixed, dict):
        raise ScenarioError(f"{path}: [set] must be a table of field = value")
    if fixed:
        scenario_from_mapping(fixed, f"{path} [set]")
        both = sorted(set(fixed) & set(grid))
        if both:
            raise ScenarioError(f"{path}: {both[0]!r} is both in [set] and in [grid]")
        if "policies" in fixed:
            raise ScenarioError(f"{path}: [set] policies: use the top-level 'policies'")
        fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in fixed.items()}
    policies = data.get("policies", list(base.policies))
    if not (isinstance(policies, list) and policies and all(isinstance(p, str) for p in policies)):
        raise ScenarioError(f"{path}: 'policies' must be a non-empty list of policy names, got {policies!r}")
    labels = tuple(s.label for s in parse_policy_specs(",".join(policies)))
    seeds = data.get("seeds", [base.seed])
    if not (isinstance(seeds, list) and seeds):
        raise ScenarioError(f"{path}: 'seeds' must be a non-empty list of integers ≥ 0, got {seeds!r}")
    for i, seed in enumerate(seeds):
        check_number(seed, f"{path}: seeds[{i}]", integer=True, ge=0, error=ScenarioError)
    sweep = Sweep(str(path), base, grid, labels, tuple(seeds), fixed)
    check_size(sweep)
    return sweep


def check_size(sweep: Sweep) -> None:
    """Refuse, before building any task, a sweep of more than :data:`MAX_TASKS` tasks."""
    if sweep.num_tasks > MAX_TASKS:
        raise ScenarioError(f"{sweep.source}: {sweep.num_points:,} points x {len(sweep.policies)} policies = "
                            f"{sweep.num_tasks:,} tasks is above the limit of {MAX_TASKS:,} tasks per sweep; "
                            "split the grid into several sweeps (each in its own directory)")
