"""One sweep task (a point × a policy) as plain, picklable data, and running it: what a worker process does.

The backends (:mod:`experiments.sweep.pool`, :mod:`experiments.sweep.ray`) and the in-process loop of the
driver (:mod:`experiments.sweep.driver`) all run :func:`run_task`; a task that produced no record of its own
gets :func:`error_record`.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.experiments.sweep.keys import named_files, point_files, runtime_versions


@dataclass(frozen=True)
class Task:
    """One point × one policy: everything a worker process needs (plain data, picklable)."""

    key: str
    point: int
    values: dict[str, Any]  # the grid values of the point, and its seed
    policy: str
    scenario: dict[str, Any]  # Scenario fields
    files: dict[str, str] = field(default_factory=dict)  # role (trace, calibration) → sha256 of the file
    code: str = ""  # the code version the key was made with (sweep.keys.code_version)
    cwd: str = ""  # the driver's working directory: relative file paths resolve against it on any worker


def _record(task: Task) -> dict[str, Any]:
    return {"key": task.key, "point": task.point, "values": task.values, "policy": task.policy,
            "scenario": task.scenario, "files": task.files, "code": task.code, "summary": None, "error": None}


def _fields(task: Task) -> dict[str, Any]:
    """The task's scenario fields that differ from the defaults, its file paths as the driver sees them."""
    from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO

    defaults = DEFAULT_SCENARIO.to_dict()  # default values need no re-checking (an empty [gpu] table)
    fields = {k: v for k, v in task.scenario.items() if k not in defaults or v != defaults[k]}
    for k, path in named_files(fields).items():  # as the driver sees them (a Ray worker has its own cwd)
        if task.cwd and not Path(path).is_absolute() and k in fields:
            fields[k] = str(Path(task.cwd) / path)
    return fields


def batch_sizes(task: Task) -> list[int] | None:
    """The sequences in each of the task's global batches (drawn as the task will), or None when the point
    cannot be built (its run will record why)."""
    from dcpsim.experiments.scenario.files import scenario_from_mapping

    try:
        sc = scenario_from_mapping(_fields(task), f"sweep point {task.point}")
        return [len(b.lengths) for b in sc.batches()]
    except Exception:  # noqa: BLE001 — the task itself reports the problem when it runs
        return None


def run_task(task: Task) -> dict[str, Any]:
    """Run one task in this process; never raises for a problem of the point (the error is recorded).

    The files the point names are hashed before and after the run: when either digest is not the one in the
    task's key (a file rewritten while the sweep ran), the record is marked ``stale`` and the driver does not
    store it under that key."""
    from dcpsim.experiments.runner import parse_policy_specs, run_policy
    from dcpsim.experiments.scenario.files import scenario_from_mapping

    t0 = time.perf_counter()
    record = _record(task)
    fields = _fields(task)
    before = point_files(fields)
    try:
        sc = scenario_from_mapping(fields, f"sweep point {task.point}")
        spec = parse_policy_specs(task.policy)[0]
        pr = run_policy(spec, sc.batches(), sc.cost_model(), sc.policy_options)
        record["summary"] = pr.summary(timings=True).to_dict()
        record["num_gpus"] = sc.num_gpus
    except Exception as e:  # noqa: BLE001 — recorded, not fatal: the sweep goes on
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=4)
    after = point_files(fields)
    paths = named_files(task.scenario)
    for role, digest in task.files.items():
        if before.get(role) != digest or after.get(role) != digest:
            record["stale"] = f"{role} file {paths.get(role, role)} changed while the sweep ran"
            break
    record["elapsed_s"] = time.perf_counter() - t0
    record["pid"] = os.getpid()
    record["worker_version"] = runtime_versions()  # the driver checks it: a cluster's workers may differ
    return record


def error_record(task: Task, error: str) -> dict[str, Any]:
    """The record of a task that produced no record of its own (its worker died, its result was lost)."""
    record = _record(task)
    record.update(error=error, elapsed_s=float("nan"), pid=None)
    return record
