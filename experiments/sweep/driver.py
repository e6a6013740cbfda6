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
directory, ``key`` hashing all four (:mod:`experiments.sweep.keys`). A rerun skips every task whose file
exists (resuming an interrupted sweep without recomputing anything); a task that raised is stored with its
error and does not stop the sweep (``retry_errors`` reruns those). The table of results, one row per point ×
policy with the scenario fields and the summary metrics, is written as ``results.parquet`` and
``results.csv`` (:mod:`experiments.sweep.results`, in bounded memory).

Backends: ``process`` (default) runs tasks in a local process pool (or in this process for one worker);
``ray`` runs them as Ray tasks (:mod:`experiments.sweep.ray`). Either way, only this process (the driver)
writes the store and the tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.output.write import write_text
from dcpsim.experiments.sweep.grid import MAX_TASKS, Sweep, check_size
from dcpsim.experiments.sweep.keys import code_version, named_files, point_files
from dcpsim.experiments.sweep.store import read_record, store, stored_status
from dcpsim.experiments.sweep.task import Task, run_task

BACKENDS = ("process", "ray")
# seconds to build one task (its key): 'python experiments/bench/sweep.py --tasks 99000 --keys-only' took 8.98 s
# for 99,000 tasks (0.091 ms each; 2 shared cores, 2026-12-02)
KEY_S = 0.091e-3


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

    ``backend="process"``: ``workers`` > 1 runs tasks in that many processes (:mod:`experiments.sweep.pool`),
    1 in this process. ``backend="ray"``: Ray tasks on the cluster at ``address`` (``auto``, ``host:port``,
    ``ray://…``), or on a local instance of ``workers`` CPUs started for the call when ``address`` is None
    (:mod:`experiments.sweep.ray`). On both, a task whose worker process dies is retried ``max_retries``
    times, then recorded as an error. ``progress(done, total)`` is called after
    every finished task (``total`` counts the tasks to compute in this call).
    """
    if backend not in BACKENDS:
        raise ScenarioError(f"backend {backend!r} is not known; valid: {', '.join(BACKENDS)}")
    out_dir = Path(out_dir)
    check_size(sweep)
    definition = claim_store(sweep, out_dir)
    say = log or (lambda _m: None)
    # the first line before the tasks are built: their keys hash every point (KEY_S each), a few seconds
    # for a grid near the MAX_TASKS cap
    building = sweep.num_tasks * KEY_S
    say(f"{sweep.num_points} points x {len(sweep.policies)} policies = {sweep.num_tasks} tasks (at most "
        f"{MAX_TASKS:,} per sweep)" + (f"; making their keys, about {building:.0f} s" if building >= 1 else ""))
    tasks = sweep.tasks()
    malformed: dict[str, str] = {}
    stored = stored_status(out_dir, malformed)
    todo = [t for t in tasks if t.key not in stored or (retry_errors and stored[t.key])]
    todo = list({t.key: t for t in todo}.values())  # equal points (a repeated grid value) run once
    reused = len(tasks) - len(todo)
    ours = {t.key for t in tasks}
    bad = sorted(k for k in malformed if k in ours)
    if bad:
        say(f"{len(bad)} stored record(s) are malformed and run again; first: points/{bad[0]}.json: "
            f"{malformed[bad[0]]}")
    where = f"Ray ({address or f'local, {workers} CPUs'})" if backend == "ray" else f"{workers} worker(s)"
    say(f"{reused} stored, {len(todo)} to run on {where}; code {tasks[0].code if tasks else code_version()}")
    long_run = sweep_warning(todo, workers)
    if long_run:
        say(long_run)
    write_text(out_dir / "sweep.json", json.dumps(
        {"source": sweep.source, "base": sweep.base.name, "grid": sweep.grid, "set": sweep.fixed,
         "policies": list(sweep.policies), "seeds": list(sweep.seeds), "points": sweep.num_points,
         "tasks": len(tasks), "code": code_version(), "definition": definition}, indent=1, default=str),
        "sweep.json")
    done = 0
    stale: list[str] = []

    def finished(rec: dict[str, Any]) -> None:
        nonlocal done
        if rec.get("stale"):  # computed from other file contents than its key's: never stored under it
            stale.append(rec["stale"])
        else:
            store(out_dir, rec)
        done += 1
        if rec.get("error"):
            say(f"point {rec['point']} {rec['policy']}: {rec['error']}")
        if progress:
            progress(done, len(todo))

    if backend == "ray":
        from dcpsim.experiments.sweep.ray import run_ray

        run_ray(todo, finished, num_cpus=workers, address=address, max_retries=max_retries)
    elif workers <= 1 or len(todo) <= 1:
        for t in todo:
            finished(run_task(t))
    else:
        from dcpsim.experiments.sweep.pool import run_pool

        run_pool(todo, finished, workers, max_retries=max_retries)
    changed = stale or changed_files(tasks)
    if changed:
        raise ScenarioError(f"{changed[0]}: its results would mix two contents, so the results table is not "
                            "written; rerun the same command (the finished points are stored under the content "
                            "they were computed from)")
    return finish(sweep, tasks, out_dir, len(todo), reused)


ESTIMATE_SAMPLE = 20  # tasks whose batches are drawn to estimate a sweep's run time (evenly spread over todo)


def sweep_warning(todo: list[Task], workers: int) -> str | None:
    """The long-run warning of a sweep (:mod:`experiments.runtime_estimate`): the mean estimate of up to
    ``ESTIMATE_SAMPLE`` of the tasks to run, times their number, over the workers; None for a short sweep."""
    from dcpsim.experiments.runtime_estimate import run_seconds, warning
    from dcpsim.experiments.sweep.task import batch_sizes

    if not todo:
        return None
    sample = todo[:: max(1, len(todo) // ESTIMATE_SAMPLE)][:ESTIMATE_SAMPLE]
    sizes = [(t, batch_sizes(t)) for t in sample]
    seconds = [run_seconds(s, [t.policy]) for t, s in sizes if s]
    if not seconds:
        return None
    seqs = [n for _t, s in sizes if s for n in s]
    held = (f"{len(todo):,} task(s) on {workers} worker(s), batches of {min(seqs):,}-{max(seqs):,} sequences in "
            f"{len(seconds)} sampled")
    return warning(held, sum(seconds) / len(seconds) * len(todo) / max(workers, 1), "this sweep")


def claim_store(sweep: Sweep, out_dir: Path) -> str:
    """Make ``out_dir`` this sweep's store, or refuse (one line) a directory holding another sweep's; return
    the sweep's definition digest (:meth:`Sweep.definition`, recorded in ``sweep.json``)."""
    definition = sweep.definition()
    if out_dir.exists() and not out_dir.is_dir():
        raise ScenarioError(f"-o {out_dir}: is a file, not a directory")
    meta = out_dir / "sweep.json"
    if meta.is_file():
        try:
            held = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ScenarioError(f"-o {out_dir}: its sweep.json cannot be read ({e}); give another directory") \
                from None
        theirs = held.get("definition") if isinstance(held, dict) else None
        if theirs is not None and theirs != definition:
            raise ScenarioError(f"-o {out_dir}: holds the results of another sweep ({held.get('source')}, "
                                f"{held.get('points')} points); give each sweep its own directory")
    try:
        (out_dir / "points").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ScenarioError(f"-o {out_dir}: cannot create the store there: {e.strerror or e}") from None
    return definition


def changed_files(tasks: list[Task]) -> list[str]:
    """The files named by ``tasks`` whose content now differs from the one in their keys (read again)."""
    digests: dict[str, str] = {}
    for t in tasks:
        now = point_files(t.scenario, digests)
        for role, digest in t.files.items():
            if now.get(role) != digest:
                return [f"{role} file {named_files(t.scenario).get(role, role)} changed while the sweep ran"]
    return []


def finish(sweep: Sweep, tasks: list[Task], out_dir: Path, computed: int, reused: int) -> SweepReport:
    """Write the results table of ``tasks`` from the store; the report of the sweep."""
    from dcpsim.experiments.sweep.results import write_results

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
