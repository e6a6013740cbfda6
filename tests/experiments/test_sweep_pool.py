"""The process backend: a worker process that dies is retried alone, then recorded; nothing is lost."""

from __future__ import annotations

import os
import uuid
from functools import partial
from pathlib import Path

import pytest

from dcpsim.experiments.sweep.grid import load_sweep
from dcpsim.experiments.sweep.pool import run_pool
from dcpsim.experiments.sweep.task import run_task

BASE = """
model = "tiny"
gpu = "h100"
tp = 1
pp = 2
pool = 4
context_len = 8192
global_batch_tokens = 65536
trace = "32k"
iterations = 1
"""

GRID = """
base = "base.toml"
policies = ["static-cp", "mcore-dcp"]
seeds = [0, 1, 2]

[grid]
pool = [2, 4]
"""


def flaky(crash: str, boom: str, attempts: str, task):
    """run_task, except that the task ``crash`` kills its worker process and ``boom`` raises."""
    if task.key == crash:
        (Path(attempts) / uuid.uuid4().hex).touch()
        os._exit(1)  # as when the OOM killer takes the process
    if task.key == boom:
        raise RuntimeError("boom")
    return run_task(task)


@pytest.fixture
def tasks(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    return load_sweep(tmp_path / "grid.toml").tasks()


def test_dead_worker_is_retried_alone_then_recorded(tasks, tmp_path):
    assert len(tasks) == 12
    crash, boom = tasks[3].key, tasks[4].key
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    got: dict[str, dict] = {}
    run_pool(tasks, lambda rec: got.setdefault(rec["key"], rec), workers=2, max_retries=1,
             fn=partial(flaky, crash, boom, str(attempts)))
    assert set(got) == {t.key for t in tasks}  # every task has its record: nothing lost
    assert got[crash]["error"].startswith("BrokenProcessPool after 1 retries: ")
    assert len(list(attempts.iterdir())) == 3  # in the shared pool, then alone: first run + 1 retry
    assert got[boom]["error"] == "RuntimeError: boom"
    ok = [got[t.key] for t in tasks if t.key not in (crash, boom)]
    assert all(r["error"] is None and r["summary"]["tokens_per_s"] > 0 for r in ok)  # the others all finished


def test_pool_without_deaths_matches_in_process(tasks):
    got: dict[str, dict] = {}
    run_pool(tasks, lambda rec: got.setdefault(rec["key"], rec), workers=2)
    here = {t.key: run_task(t) for t in tasks}
    for k, rec in here.items():
        a = {m: v for m, v in rec["summary"].items() if m != "scheduling_time_s"}
        b = {m: v for m, v in got[k]["summary"].items() if m != "scheduling_time_s"}
        assert a == b
    assert {r["pid"] for r in got.values()}.isdisjoint({os.getpid()})
