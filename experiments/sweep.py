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
pure function of its scenario and policy (the only measured quantity is ``scheduling_time_s``) and is stored,
as soon as it finishes, as ``points/<key>.json`` in the output directory, ``key`` being a hash of the point's
scenario content and the policy. A rerun skips every task whose file exists (resuming an interrupted sweep
without recomputing anything); a task that raised is stored with its error and does not stop the sweep
(``retry_errors`` reruns those). The table of results, one row per point × policy with the scenario fields
and the summary metrics, is written as ``results.parquet`` and ``results.csv``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.scenario import Scenario

SCHEMA = 1  # bump when a stored record's meaning changes: old files then no longer match any key
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
        for i, combo in enumerate(itertools.product(*self.grid.values(), self.seeds)):
            values = dict(zip(names + ["seed"], combo))
            sc = base.with_(**values, name=f"{self.base.name}#{i}")
            content = _scenario_fields(sc)
            for pol in self.policies:
                out.append(Task(task_key(content, pol), i, values, pol, content))
        return out


def _scenario_fields(sc: Scenario) -> dict[str, Any]:
    d = sc.to_dict()
    d.pop("num_gpus", None)
    d["policies"] = list(sc.policies)
    return d


def task_key(scenario: dict[str, Any], policy: str) -> str:
    """A stable 16-hex-digit key of a task: the scenario's content (not its name) and the policy label."""
    content = {k: v for k, v in scenario.items() if k not in ("name", "description", "policies")}
    blob = json.dumps({"schema": SCHEMA, "scenario": content, "policy": policy}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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


def run_task(task: Task) -> dict[str, Any]:
    """Run one task in this process; never raises for a problem of the point (the error is recorded)."""
    from dcpsim.experiments.runner import parse_policy_specs, run_policy
    from dcpsim.experiments.scenario_files import scenario_from_mapping

    t0 = time.perf_counter()
    record: dict[str, Any] = {"key": task.key, "point": task.point, "values": task.values, "policy": task.policy,
                              "scenario": task.scenario, "summary": None, "error": None}
    try:
        fields = dict(task.scenario)
        sc = scenario_from_mapping(fields, f"sweep point {task.point}")
        spec = parse_policy_specs(task.policy)[0]
        pr = run_policy(spec, sc.batches(), sc.cost_model(), sc.policy_options)
        record["summary"] = pr.summary(timings=True)
        record["num_gpus"] = sc.num_gpus
    except Exception as e:  # noqa: BLE001 — recorded, not fatal: the sweep goes on
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=4)
    record["elapsed_s"] = time.perf_counter() - t0
    record["pid"] = os.getpid()
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


def load_records(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Stored records by key (unreadable files are ignored: their tasks run again)."""
    out = {}
    for p in (out_dir / "points").glob("*.json"):
        try:
            rec = json.loads(p.read_text())
            out[rec["key"]] = rec
        except (OSError, ValueError, KeyError):
            continue
    return out


@dataclass
class SweepReport:
    total: int
    computed: int
    reused: int
    failed: int
    table: pd.DataFrame
    files: list[Path]


def run_sweep(sweep: Sweep, out_dir: str | Path, workers: int = 1, retry_errors: bool = False,
              progress: Callable[[int, int], None] | None = None,
              log: Callable[[str], None] | None = None) -> SweepReport:
    """Run every task of ``sweep`` not already stored in ``out_dir``, then write the results table.

    ``workers`` > 1 runs tasks in that many processes; 1 runs them in this process. ``progress(done, total)``
    is called after every finished task (``total`` counts the tasks to compute in this call).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = sweep.tasks()
    stored = load_records(out_dir)
    todo = [t for t in tasks if t.key not in stored or (retry_errors and stored[t.key].get("error"))]
    reused = len(tasks) - len(todo)
    say = log or (lambda _m: None)
    say(f"{sweep.num_points} points x {len(sweep.policies)} policies = {len(tasks)} tasks; {reused} stored, "
        f"{len(todo)} to run on {workers} worker(s)")
    (out_dir / "sweep.json").write_text(json.dumps(
        {"source": sweep.source, "base": sweep.base.name, "grid": sweep.grid, "set": sweep.fixed,
         "policies": list(sweep.policies), "seeds": list(sweep.seeds), "points": sweep.num_points,
         "tasks": len(tasks)}, indent=1, default=str))
    done = 0

    def finished(rec: dict[str, Any]) -> None:
        nonlocal done
        store(out_dir, rec)
        stored[rec["key"]] = rec
        done += 1
        if rec.get("error"):
            say(f"point {rec['point']} {rec['policy']}: {rec['error']}")
        if progress:
            progress(done, len(todo))

    if workers <= 1 or len(todo) <= 1:
        for t in todo:
            finished(run_task(t))
    else:
        _run_parallel(todo, workers, finished)
    table = results_table(sweep, tasks, stored)
    files = write_results(table, out_dir)
    failed = int(table["error"].astype(bool).sum()) if len(table) else 0
    return SweepReport(len(tasks), len(todo), reused, failed, table, files)


def _run_parallel(todo: list[Task], workers: int, finished: Callable[[dict[str, Any]], None]) -> None:
    """Run tasks in a process pool, at most ``2 × workers`` in flight; store each as it completes."""
    pool = ProcessPoolExecutor(max_workers=workers)
    pending: set = set()
    queue = iter(todo)
    try:
        for t in itertools.islice(queue, 2 * workers):
            pending.add(pool.submit(run_task, t))
        while pending:
            complete, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in complete:
                finished(fut.result())
                nxt = next(queue, None)
                if nxt is not None:
                    pending.add(pool.submit(run_task, nxt))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def results_table(sweep: Sweep, tasks: list[Task], records: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per point × policy (sweep order): point, grid values, scenario fields, metrics, error."""
    rows = []
    metric_cols: dict[str, None] = {}
    for t in tasks:
        rec = records.get(t.key)
        if rec is None:
            continue
        row: dict[str, Any] = {"point": t.point, "key": t.key, "policy": t.policy}
        row.update({f"grid.{k}": v for k, v in t.values.items()})
        for k, v in t.scenario.items():
            if k in ("policies", "name"):
                continue
            row[k] = json.dumps(v, sort_keys=True) if isinstance(v, dict | list | tuple) else v
        row["num_gpus"] = t.scenario["tp"] * t.scenario["pp"] * t.scenario["pool"]
        summary = rec.get("summary") or {}
        for k, v in summary.items():
            if k != "policy":
                row[k] = v
                metric_cols[k] = None
        row["error"] = rec.get("error") or ""
        row["elapsed_s"] = rec.get("elapsed_s", float("nan"))
        rows.append(row)
    df = pd.DataFrame(rows)
    if len(df):  # a fixed column order: identity and scenario, metrics (summary order), error, elapsed
        front = [c for c in df.columns if c not in metric_cols and c not in ("error", "elapsed_s")]
        df = df[front + list(metric_cols) + ["error", "elapsed_s"]]
    return df


def write_results(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    paths = [out_dir / "results.parquet", out_dir / "results.csv"]
    t = table.copy()
    for c in t.columns:  # Parquet wants one type per column: mixed-type grid columns become strings
        if t[c].dtype == object and len({type(v) for v in t[c] if v is not None}) > 1:
            t[c] = t[c].astype(str)
    t.to_parquet(paths[0], index=False)
    table.to_csv(paths[1], index=False)
    return paths
