"""dcpsim sweep --backend ray: the same store and results as the process pool, resume, recorded failures.

One local Ray instance (2 CPUs) serves the whole module; run_sweep uses an initialised Ray as it is.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from dcpsim.experiments.cli import main  # noqa: E402
from dcpsim.experiments.sweep.driver import run_sweep  # noqa: E402
from dcpsim.experiments.sweep.grid import load_sweep  # noqa: E402
from dcpsim.experiments.sweep.ray import run_ray  # noqa: E402
from dcpsim.experiments.sweep.store import stored_status  # noqa: E402

BASE = """
model = "llama3-8b"
gpu = "h200"
tp = 1
pp = 2
pool = 8
context_len = 32768
global_batch_tokens = 262144
trace = "32k"
"""

GRID = """
base = "base.toml"
policies = ["static-cp", "mcore-dcp"]
seeds = [0, 1]

[set]
iterations = 1

[grid]
pool = [4, 8]
max_tokens_per_rank = [16384, 100]   # 100 tokens per rank cannot hold any 32K document: those tasks fail
"""

TIMING = ["scheduling_time_s", "elapsed_s"]  # measured wall times; everything else is a function of the point


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def grid(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    return tmp_path / "grid.toml"


def test_same_results_as_process_pool(local_ray, grid, tmp_path):
    proc = run_sweep(load_sweep(grid), tmp_path / "p", workers=2)
    on_ray = run_sweep(load_sweep(grid), tmp_path / "r", workers=2, backend="ray")
    assert proc.total == on_ray.total == 16 and on_ray.computed == 16 and on_ray.failed == proc.failed == 8
    a = pd.read_parquet(tmp_path / "p" / "results.parquet")
    b = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert list(a.columns) == list(b.columns) and len(a) == 16
    pd.testing.assert_frame_equal(a.drop(columns=TIMING), b.drop(columns=TIMING))
    # the failing tasks are recorded with the same error on both backends
    bad = b[b.max_tokens_per_rank == 100]
    assert len(bad) == 8 and (bad.error != "").all()
    assert (bad.error == a[a.max_tokens_per_rank == 100].error).all()
    # the records were computed in Ray's worker processes, not in this one
    pids = {json.loads(p.read_text())["pid"] for p in (tmp_path / "r" / "points").glob("*.json")}
    assert os.getpid() not in pids


def test_interrupted_sweep_resumes(local_ray, grid, tmp_path):
    out = tmp_path / "out"

    def interrupt(done, total):
        if done == 5:
            raise KeyboardInterrupt  # what Ctrl-C does to the driver

    with pytest.raises(KeyboardInterrupt):
        run_sweep(load_sweep(grid), out, workers=2, backend="ray", progress=interrupt)
    kept = {p.name: p.read_bytes() for p in (out / "points").glob("*.json")}
    assert len(kept) == 5 and not list((out / "points").glob(".*.tmp"))
    rerun = run_sweep(load_sweep(grid), out, workers=2, backend="ray")
    assert rerun.computed == 11 and rerun.reused == 5 and rerun.rows == 16
    assert all((out / "points" / name).read_bytes() == data for name, data in kept.items())  # not rewritten


def test_prepopulated_store_recomputes_only_missing(local_ray, grid, tmp_path):
    out = tmp_path / "out"
    run_sweep(load_sweep(grid), out, workers=1)  # in this process: every record carries our pid
    files = sorted((out / "points").glob("*.json"))
    lost = {p.stem for p in files[:3]}
    for p in files[:3]:
        p.unlink()
    rep = run_sweep(load_sweep(grid), out, workers=2, backend="ray")
    assert rep.computed == 3 and rep.reused == 13
    records = {p.stem: json.loads(p.read_text()) for p in (out / "points").glob("*.json")}
    here = {k for k, rec in records.items() if rec["pid"] == os.getpid()}
    assert here == {p.stem for p in files} - lost


def test_retry_errors_on_ray(local_ray, grid, tmp_path):
    out = tmp_path / "out"
    run_sweep(load_sweep(grid), out, workers=2, backend="ray")
    rep = run_sweep(load_sweep(grid), out, workers=2, backend="ray", retry_errors=True)
    assert rep.computed == 8 and rep.failed == 8  # only the failed tasks ran again (and failed again)


def test_lost_worker_and_raising_task_are_recorded(local_ray, grid, tmp_path):
    tasks = load_sweep(grid).tasks()[:4]
    crash, boom, stale = tasks[0].key, tasks[1].key, tasks[2].key
    attempts = tmp_path / "attempts"
    attempts.mkdir()

    def flaky(task):  # pickled by value: runs in Ray's workers
        import os as _os

        from dcpsim.experiments.sweep.task import run_task

        if task.key == crash:
            (attempts / str(_os.getpid())).touch()
            _os._exit(1)  # the worker process dies, as when the OOM killer takes it
        if task.key == boom:
            raise RuntimeError("boom")
        rec = run_task(task)
        if task.key == stale:
            rec["worker_version"] = "0.0.0-other"
        return rec

    got = {}
    run_ray(tasks, lambda rec: got.setdefault(rec["key"], rec), max_retries=1, fn=flaky)
    assert set(got) == {t.key for t in tasks}  # nothing lost
    assert got[crash]["error"].startswith("WorkerCrashedError, Ray gave up retrying (max_retries=1): ")
    assert len(list(attempts.iterdir())) == 2  # the first try and one retry, each in a fresh worker
    assert got[boom]["error"] == "RuntimeError: boom"
    assert "0.0.0-other" in got[stale]["error"]
    assert got[tasks[3].key]["error"] is None and got[tasks[3].key]["summary"]["tokens_per_s"] > 0


def test_cli_ray_backend(local_ray, grid, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["sweep", str(grid), "-o", str(out), "--backend", "ray", "--no-progress"]
    assert main([*args, "--workers", "2"]) == 0
    assert "16 computed, 0 reused, 8 failed" in capsys.readouterr().out
    assert len(stored_status(out)) == 16
    assert main(args) == 0
    assert "0 computed, 16 reused" in capsys.readouterr().out


def test_relative_trace_file_resolves_as_on_the_driver(local_ray, tmp_path, monkeypatch):
    """A Ray worker has its own working directory: the driver's relative paths travel resolved."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.toml").write_text(BASE.replace('trace = "32k"', 'trace = "lengths.csv"'))
    (tmp_path / "grid.toml").write_text('base = "base.toml"\npolicies = ["static-cp", "mcore-dcp"]\n'
                                        '[set]\niterations = 1\n[grid]\npool = [4, 8]\n')
    (tmp_path / "lengths.csv").write_text("length\n" + "30000\n9000\n4000\n" * 6)
    proc = run_sweep(load_sweep(tmp_path / "grid.toml"), tmp_path / "p", workers=1)
    on_ray = run_sweep(load_sweep(tmp_path / "grid.toml"), tmp_path / "r", backend="ray")
    assert proc.failed == on_ray.failed == 0 and on_ray.computed == 4
    a, b = proc.read_table(), on_ray.read_table()
    assert (b.trace == "lengths.csv").all()  # the table shows the path as written
    pd.testing.assert_frame_equal(a.drop(columns=TIMING), b.drop(columns=TIMING))
