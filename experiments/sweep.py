"""What-if sweeps: a grid of scenario fields × seeds × policies, run in parallel, resumable.

A sweep file (TOML)::

    base = "h100-512-32k"        # a named scenario or a scenario .toml (relative to the sweep file)
    policies = ["static-cp", "mcore-dcp", "hydra"]   # optional; default: the base scenario's
    seeds = [0, 1, 2]            # optional; default: [the base scenario's seed]

    [set]                        # optional: fields fixed for every point
    iterations = 1

    [grid]                       # field → list of values; the points are the Cartesian product
    pool = [16, 32, 64]
    context_len = [65536, 262144]

A *point* is one combination of grid values and one seed; a *task* is a point × a policy. Every task is a
pure function of its scenario, its policy, the files it names and the code (the only measured quantity is
``scheduling_time_s``) and is stored, as soon as it finishes, as ``points/<key>.json`` in the output
directory, ``key`` hashing all four (:mod:`experiments.sweep_keys`). A rerun skips every task whose file
exists (resuming an interrupted sweep without recomputing anything); a task that raised is stored with its
error and does not stop the sweep (``retry_errors`` reruns those). The table of results, one row per point ×
policy with the scenario fields and the summary metrics, is written as ``results.parquet`` and
``results.csv`` (:mod:`experiments.sweep_results`, in bounded memory).

Backends: ``process`` (default) runs tasks in a local process pool (or in this process for one worker);
``ray`` runs them as Ray tasks (:mod:`experiments.sweep_ray`). Either way, only this process (the driver)
writes the store and the tables.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.scenario import Scenario
from dcpsim.experiments.sweep_keys import code_version, named_files, point_files, runtime_versions, task_key

BACKENDS = ("process", "ray")
TOP_KEYS = {"base", "policies", "seeds", "grid", "set", "description"}
NOT_GRIDDABLE = {"name", "description", "policies", "seed"}


@dataclass(frozen=True)
class Task:
    """One point × one policy: everything a worker process needs (plain data, picklable)."""

    key: str
    point: int
    values: dict[str, Any]  # the grid values of the point, and its seed
    policy: str
    scenario: dict[str, Any]  # Scenario fields
    files: dict[str, str] = field(default_factory=dict)  # role (trace, calibration) → sha256 of the file
    code: str = ""  # the code version the key was made with (sweep_keys.code_version)
    cwd: str = ""  # the driver's working directory: relative file paths resolve against it on any worker


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
    from dcpsim.experiments.scenario_files import load_scenario, read_toml, scenario_from_mapping

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
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) and s >= 0 for s in seeds)):
        raise ScenarioError(f"{path}: 'seeds' must be a non-empty list of integers ≥ 0, got {seeds!r}")
    return Sweep(str(path), base, grid, labels, tuple(seeds), fixed)


def _record(task: Task) -> dict[str, Any]:
    return {"key": task.key, "point": task.point, "values": task.values, "policy": task.policy,
            "scenario": task.scenario, "files": task.files, "code": task.code, "summary": None, "error": None}


def run_task(task: Task) -> dict[str, Any]:
    """Run one task in this process; never raises for a problem of the point (the error is recorded)."""
    from dcpsim.experiments.runner import parse_policy_specs, run_policy
    from dcpsim.experiments.scenario import DEFAULT_SCENARIO
    from dcpsim.experiments.scenario_files import scenario_from_mapping

    t0 = time.perf_counter()
    record = _record(task)
    try:
        defaults = DEFAULT_SCENARIO.to_dict()  # default values need no re-checking (an empty [gpu] table)
        fields = {k: v for k, v in task.scenario.items() if k not in defaults or v != defaults[k]}
        for k, path in named_files(fields).items():  # as the driver sees them (a Ray worker has its own cwd)
            if task.cwd and not Path(path).is_absolute():
                fields[k] = str(Path(task.cwd) / path)
        sc = scenario_from_mapping(fields, f"sweep point {task.point}")
        spec = parse_policy_specs(task.policy)[0]
        pr = run_policy(spec, sc.batches(), sc.cost_model(), sc.policy_options)
        record["summary"] = pr.summary(timings=True).to_dict()
        record["num_gpus"] = sc.num_gpus
    except Exception as e:  # noqa: BLE001 — recorded, not fatal: the sweep goes on
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=4)
    record["elapsed_s"] = time.perf_counter() - t0
    record["pid"] = os.getpid()
    record["worker_version"] = runtime_versions()  # the driver checks it: a cluster's workers may differ
    return record


def error_record(task: Task, error: str) -> dict[str, Any]:
    """The record of a task that produced no record of its own (its worker died, its result was lost)."""
    record = _record(task)
    record.update(error=error, elapsed_s=float("nan"), pid=None)
    return record


def store(out_dir: Path, record: dict[str, Any]) -> Path:
    """Write a task's record atomically (a partial file never looks finished)."""
    points = out_dir / "points"
    points.mkdir(parents=True, exist_ok=True)
    final = points / f"{record['key']}.json"
    tmp = points / f".{record['key']}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, default=str))
    os.replace(tmp, final)
    return final


def read_record(out_dir: Path, key: str) -> dict[str, Any] | None:
    """The stored record of ``key``, or None (absent or unreadable: the task runs again)."""
    try:
        rec = json.loads((out_dir / "points" / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("key") == key else None


def stored_status(out_dir: Path) -> dict[str, bool]:
    """Key → whether its stored record is an error, for every readable record (one in memory at a time)."""
    out = {}
    for p in (out_dir / "points").glob("*.json"):
        rec = read_record(out_dir, p.stem)
        if rec is not None:
            out[p.stem] = bool(rec.get("error"))
    return out


@dataclass
class SweepReport:
    total: int
    computed: int
    reused: int
    failed: int
    rows: int
    files: list[Path]  # results.parquet, results.csv

    def read_table(self) -> pd.DataFrame:
        """``results.parquet`` as it is now (the sweep never holds the whole table: a grid can be large)."""
        return pd.read_parquet(self.files[0])


def run_sweep(sweep: Sweep, out_dir: str | Path, workers: int = 1, retry_errors: bool = False,
              progress: Callable[[int, int], None] | None = None,
              log: Callable[[str], None] | None = None, backend: str = "process", address: str | None = None,
              max_retries: int = 3) -> SweepReport:
    """Run every task of ``sweep`` not already stored in ``out_dir``, then write the results table.

    ``backend="process"``: ``workers`` > 1 runs tasks in that many processes (:mod:`experiments.sweep_pool`),
    1 in this process. ``backend="ray"``: Ray tasks on the cluster at ``address`` (``auto``, ``host:port``,
    ``ray://…``), or on a local instance of ``workers`` CPUs started for the call when ``address`` is None
    (:mod:`experiments.sweep_ray`). On both, a task whose worker process dies is retried ``max_retries``
    times, then recorded as an error. ``progress(done, total)`` is called after
    every finished task (``total`` counts the tasks to compute in this call).
    """
    if backend not in BACKENDS:
        raise ScenarioError(f"backend {backend!r} is not known; valid: {', '.join(BACKENDS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = sweep.tasks()
    stored = stored_status(out_dir)
    todo = [t for t in tasks if t.key not in stored or (retry_errors and stored[t.key])]
    todo = list({t.key: t for t in todo}.values())  # equal points (a repeated grid value) run once
    reused = len(tasks) - len(todo)
    say = log or (lambda _m: None)
    where = f"Ray ({address or f'local, {workers} CPUs'})" if backend == "ray" else f"{workers} worker(s)"
    say(f"{sweep.num_points} points x {len(sweep.policies)} policies = {len(tasks)} tasks; {reused} stored, "
        f"{len(todo)} to run on {where}; code {tasks[0].code if tasks else code_version()}")
    (out_dir / "sweep.json").write_text(json.dumps(
        {"source": sweep.source, "base": sweep.base.name, "grid": sweep.grid, "set": sweep.fixed,
         "policies": list(sweep.policies), "seeds": list(sweep.seeds), "points": sweep.num_points,
         "tasks": len(tasks), "code": code_version()}, indent=1, default=str))
    done = 0

    def finished(rec: dict[str, Any]) -> None:
        nonlocal done
        store(out_dir, rec)
        done += 1
        if rec.get("error"):
            say(f"point {rec['point']} {rec['policy']}: {rec['error']}")
        if progress:
            progress(done, len(todo))

    if backend == "ray":
        from dcpsim.experiments.sweep_ray import run_ray

        run_ray(todo, finished, num_cpus=workers, address=address, max_retries=max_retries)
    elif workers <= 1 or len(todo) <= 1:
        for t in todo:
            finished(run_task(t))
    else:
        from dcpsim.experiments.sweep_pool import run_pool

        run_pool(todo, finished, workers, max_retries=max_retries)
    return finish(sweep, tasks, out_dir, len(todo), reused)


def finish(sweep: Sweep, tasks: list[Task], out_dir: Path, computed: int, reused: int) -> SweepReport:
    """Write the results table of ``tasks`` from the store; the report of the sweep."""
    from dcpsim.experiments.sweep_results import write_results

    failed = 0

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal failed
        failed = 0
        for t in tasks:
            rec = read_record(out_dir, t.key)
            if rec is not None:
                failed += bool(rec.get("error"))
                yield result_row(t, rec)

    files, n = write_results(rows, out_dir)
    return SweepReport(len(tasks), computed, reused, failed, n, files)


def result_row(t: Task, rec: dict[str, Any]) -> dict[str, Any]:
    """A results row: point, key, policy, grid values, scenario fields, metrics, error, elapsed."""
    row: dict[str, Any] = {"point": t.point, "key": t.key, "policy": t.policy}
    row.update({f"grid.{k}": v for k, v in t.values.items()})
    for k, v in t.scenario.items():
        if k in ("policies", "name"):
            continue
        row[k] = json.dumps(v, sort_keys=True) if isinstance(v, dict | list | tuple) else v
    row["num_gpus"] = t.scenario["tp"] * t.scenario["pp"] * t.scenario["pool"]
    from dcpsim.experiments.runner import RunSummary

    summary = rec.get("summary") or {}
    for k in RunSummary.columns():  # every declared metric, in declaration order (None: the point failed)
        if k != "policy":
            row[k] = summary.get(k)
    row["error"] = rec.get("error") or ""
    row["elapsed_s"] = rec.get("elapsed_s", float("nan"))
    return row
