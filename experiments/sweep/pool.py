"""The process backend of ``dcpsim sweep``: a local ``ProcessPoolExecutor``; the driver stores what returns.

At most ``2 × workers`` tasks are in flight; each finished one is handed to ``finished`` (which stores it)
and the next submitted. A worker process that dies (killed, out of memory, a crash in native code) breaks
the whole pool (``BrokenProcessPool``) and fails every task in flight, so which one killed it is unknown:
those tasks then run again *one at a time*, each in a pool of its own, where a death can only be its own. A
task that dies alone ``1 + max_retries`` times is stored as an error, never lost; the others finish normally
and the sweep goes on with a fresh pool. (Ray's backend retries the same way, per task: ``sweep.ray``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from dcpsim.experiments.sweep.task import Task, error_record, run_task

Finished = Callable[[dict[str, Any]], None]


def run_pool(todo: list[Task], finished: Finished, workers: int, max_retries: int = 3,
             fn: Callable[[Task], dict[str, Any]] = run_task) -> None:
    """Run ``fn`` on every task in ``workers`` processes; call ``finished(record)`` here as each completes."""
    queue = iter(todo)
    while True:
        lost = _pool_pass(queue, workers, finished, fn)
        if not lost:
            return
        for task in lost:  # one of these killed the pool: run each alone, where a death is its own
            for _attempt in range(1 + max_retries):
                if not _pool_pass(iter([task]), 1, finished, fn):
                    break
            else:
                finished(error_record(task, f"BrokenProcessPool after {max_retries} retries: its worker "
                                            f"process died each of {1 + max_retries} times it ran alone "
                                            "(killed, out of memory, or crashed)"))


def _pool_pass(queue: Iterator[Task], workers: int, finished: Finished,
               fn: Callable[[Task], dict[str, Any]]) -> list[Task]:
    """Run tasks from ``queue`` until it is empty (→ []) or a worker dies (→ the tasks then in flight)."""
    pool = ProcessPoolExecutor(max_workers=workers)
    pending: dict[Future, Task] = {}

    def submit() -> None:
        t = next(queue, None)
        if t is not None:
            pending[pool.submit(fn, t)] = t

    try:
        for _ in range(2 * workers):
            submit()
        while pending:
            complete, _ = wait(pending, return_when=FIRST_COMPLETED)
            if any(isinstance(fut.exception(), BrokenProcessPool) for fut in complete):
                lost = []
                for fut, task in pending.items():  # the pool is gone: keep what finished, the rest was lost
                    if isinstance(fut.exception(), BrokenProcessPool):
                        lost.append(task)
                    else:
                        finished(_record(fut, task))
                pool.shutdown(wait=True)
                return lost
            for fut in complete:
                finished(_record(fut, pending.pop(fut)))
                submit()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return []


def _record(fut: Future, task: Task) -> dict[str, Any]:
    """A finished future's record; an exception of ``fn`` itself (run_task records its own) becomes one."""
    e = fut.exception()
    if e is None:
        return fut.result()
    return error_record(task, f"{type(e).__name__}: {e}")
