"""The Ray backend of ``dcpsim sweep``: tasks run as Ray tasks; the driver stores what they return.

Design:

- **Records travel back to the driver, which alone writes the store** (``points/<key>.json``, atomically)
  and the tables. Workers need no access to the output directory (no shared filesystem between the nodes of
  a cluster), a record is a few kilobytes, and one writer means no two processes ever race on a file. A
  driver that is killed loses only the tasks in flight: the rerun recomputes them.
- **Bounded submission.** At most ``in_flight`` tasks are submitted at a time (default: twice the cluster's
  CPUs, at least 4); each finished one is stored, its result dropped, and the next submitted. A grid of
  100,000 tasks never holds 100,000 object references or results.
- **Failures are recorded, never lost.** ``run_task`` already records a point's own exception. A task whose
  worker process dies (killed, out of memory, node lost) is retried by Ray up to ``max_retries`` times
  (``@ray.remote(max_retries=…)``, system failures only; tasks killed by Ray's memory monitor follow Ray's
  own OOM retry policy); after that its record says so as an error, and ``--retry-errors`` runs it again.
- **Same code on every worker.** Each record carries the worker's versions of dcpsim, numpy, scipy and simpy
  (``sweep.keys.runtime_versions``); one that differs from the driver's is stored as an error naming both
  (the key promises results of the driver's code).
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Callable
from typing import Any

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.sweep.task import Task, error_record, run_task

MISSING_RAY = ("--backend ray needs Ray, which is not installed here: pip install 'dcpsim[ray]' "
               "(and the same on every node of the cluster)")


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`ScenarioError` saying how to install it."""
    try:
        return importlib.import_module("ray")  # not a static import: type checks pass without the extra
    except ImportError:
        raise ScenarioError(MISSING_RAY) from None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ``HOST:PORT`` (or ``ray://HOST:PORT``) address that accepts no TCP connection is a ScenarioError.

    Without this, ``ray.init`` retries an unreachable address for minutes. ``auto`` is left to Ray.
    """
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ScenarioError(f"--address {address}: no Ray cluster answers there ({e.strerror or e}); "
                            "start one with 'ray start --head', or use --address auto on a node of the "
                            "cluster") from None


def connect(ray: Any, address: str | None, num_cpus: int) -> bool:
    """Join the cluster at ``address`` or start a local instance of ``num_cpus`` CPUs; True if we started it.

    An already initialised Ray (a test fixture, a notebook) is used as it is.
    """
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning", "log_to_driver": False}
    if address:
        check_reachable(address)
    try:
        if address:
            ray.init(address=address, **kw)
        else:
            ray.init(num_cpus=num_cpus, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address!r}" if address else f"a local Ray instance ({num_cpus} CPUs)"
        raise ScenarioError(f"--backend ray: cannot start or reach {where}: {e}".splitlines()[0]) from None
    return True


def run_ray(todo: list[Task], finished: Callable[[dict[str, Any]], None], num_cpus: int = 1,
            address: str | None = None, max_retries: int = 3, in_flight: int | None = None,
            fn: Callable[[Task], dict[str, Any]] = run_task) -> None:
    """Run ``fn`` on every task as Ray tasks; call ``finished(record)`` in this process as each completes."""
    ray = import_ray()
    if not todo:
        return
    from dcpsim.experiments.sweep.keys import runtime_versions

    started = connect(ray, address, num_cpus)
    remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(fn)
    if in_flight is None:
        in_flight = max(4, 2 * int(ray.cluster_resources().get("CPU", num_cpus)))
    pending: dict[Any, Task] = {}
    queue = iter(todo)

    def submit() -> None:
        t = next(queue, None)
        if t is not None:
            pending[remote.remote(t)] = t

    try:
        for _ in range(in_flight):
            submit()
        while pending:
            ready, rest = ray.wait(list(pending), num_returns=1)
            if rest:  # everything else already done, without waiting
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                ready += more
            for ref in ready:
                task = pending.pop(ref)
                finished(_collect(ray, ref, task, max_retries, runtime_versions()))
                submit()
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def _collect(ray: Any, ref: Any, task: Task, max_retries: int, version: str) -> dict[str, Any]:
    """The record of a finished Ray task; a lost one becomes an error record."""
    try:
        rec = ray.get(ref)
    except ray.exceptions.RayTaskError as e:  # fn itself raised (run_task records point errors itself)
        cause = e.cause if getattr(e, "cause", None) is not None else e
        first = str(cause).splitlines()[0] if str(cause) else ""
        return error_record(task, f"{type(cause).__name__}: {first}")
    except ray.exceptions.RayError as e:  # worker died / OOM-killed / node lost, after the retries
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return error_record(task, f"{type(e).__name__}, Ray gave up retrying (max_retries={max_retries}): "
                                  f"{first}")
    if rec.get("worker_version") != version:
        return error_record(task, f"the worker runs {rec.get('worker_version')}, the driver {version}: "
                                  "install the same versions on every node")
    return rec
