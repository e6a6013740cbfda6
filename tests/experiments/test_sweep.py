"""dcpsim sweep: grid parsing, resuming without recomputation, recorded errors, parallel = serial."""

from __future__ import annotations

import json
import socket
import sys

import pandas as pd
import pytest

import dcpsim.experiments.sweep.driver as sweep_mod
from dcpsim.experiments.cli import main
from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.sweep.driver import run_sweep
from dcpsim.experiments.sweep.grid import load_sweep

BASE = """
model = "llama3-8b"
gpu = "h200"
tp = 1
pp = 2
pool = 8
context_len = 32768
global_batch_tokens = 262144
trace = "32k"
policies = ["static-cp", "mcore-dcp"]
"""

GRID = """
base = "base.toml"
policies = ["static-cp", "mcore-dcp"]
seeds = [0, 1]

[set]
iterations = 1

[grid]
pool = [4, 8]
max_tokens_per_rank = [16384, 100]   # 100 tokens per rank cannot hold any 32K document: those points fail
"""


@pytest.fixture
def grid(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    return tmp_path / "grid.toml"


@pytest.fixture
def counting(monkeypatch):
    """Count the tasks actually computed (workers=1 runs them in this process)."""
    calls = []
    real = sweep_mod.run_task

    def run_task(task):
        calls.append(task.key)
        return real(task)

    monkeypatch.setattr(sweep_mod, "run_task", run_task)
    return calls


def test_grid_parsing(grid):
    sw = load_sweep(grid)
    assert sw.num_points == 2 * 2 * 2
    tasks = sw.tasks()
    assert len(tasks) == 16 and len({t.key for t in tasks}) == 16
    assert [t.key for t in tasks] == [t.key for t in load_sweep(grid).tasks()]  # stable keys
    assert {t.scenario["iterations"] for t in tasks} == {1}


def test_resume_skips_finished_points(grid, tmp_path, counting):
    out = tmp_path / "out"
    first = run_sweep(load_sweep(grid), out, workers=1)
    assert len(counting) == 16 and first.computed == 16 and first.reused == 0
    first_table = first.read_table()
    assert len(list((out / "points").glob("*.json"))) == 16
    counting.clear()
    again = run_sweep(load_sweep(grid), out, workers=1)
    assert counting == [] and again.computed == 0 and again.reused == 16
    pd.testing.assert_frame_equal(first_table, again.read_table())  # reused records: the same table
    # an interruption loses at most the unfinished points: remove two, only those two run again
    victims = sorted((out / "points").glob("*.json"))[:2]
    lost = {json.loads(p.read_text())["key"] for p in victims}
    for p in victims:
        p.unlink()
    counting.clear()
    third = run_sweep(load_sweep(grid), out, workers=1)
    assert set(counting) == lost and third.computed == 2
    for f in ("results.parquet", "results.csv"):
        assert (out / f).exists()
    t = pd.read_parquet(out / "results.parquet")
    assert len(t) == 16 and {"policy", "pool", "seed", "grid.pool", "tokens_per_s", "error"} <= set(t.columns)


def test_errors_are_recorded_not_fatal(grid, tmp_path, counting):
    rep = run_sweep(load_sweep(grid), tmp_path / "out", workers=1)
    t = rep.read_table()
    bad = t[t.max_tokens_per_rank == 100]
    good = t[t.max_tokens_per_rank == 16384]
    assert len(bad) == 8 and (bad.error != "").all() and bad.tokens_per_s.isna().all()
    assert len(good) == 8 and (good.error == "").all() and (good.tokens_per_s > 0).all()
    assert rep.failed == 8
    counting.clear()
    retry = run_sweep(load_sweep(grid), tmp_path / "out", workers=1, retry_errors=True)
    assert retry.computed == 8 and len(counting) == 8


def test_parallel_matches_serial(grid, tmp_path):
    serial = run_sweep(load_sweep(grid), tmp_path / "s", workers=1).read_table()
    parallel = run_sweep(load_sweep(grid), tmp_path / "p", workers=2).read_table()
    cols = ["key", "policy", "iteration_time_s", "tokens_per_s", "pipeline_bubble", "error"]
    pd.testing.assert_frame_equal(serial[cols], parallel[cols])


@pytest.mark.parametrize("text, match", [
    ("[grid]\nbogus = [1]\n", "unknown key 'bogus'"),
    ("[grid]\npool = 8\n", "non-empty list"),
    ("[grid]\npool = ['x']\n", "pool = 'x' is invalid: expected an integer ≥ 1"),
    ("[grid]\nseed = [1]\n", "use 'seeds'"),
    ("seeds = [-1]\n[grid]\npool = [8]\n", "seeds"),
    ("extra = 1\n[grid]\npool = [8]\n", "unknown key 'extra'"),
    ("base = 'default'\n", r"\[grid\] table"),
])
def test_bad_sweep_files(tmp_path, text, match):
    p = tmp_path / "g.toml"
    p.write_text(text)
    with pytest.raises(ScenarioError, match=match):
        load_sweep(p)


def test_cli(grid, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["sweep", str(grid), "-o", str(out), "--workers", "1", "--no-progress"]) == 0
    assert "16 computed, 0 reused, 8 failed" in capsys.readouterr().out
    assert main(["sweep", str(grid), "-o", str(out), "--workers", "1", "--no-progress"]) == 0
    assert "0 computed, 16 reused" in capsys.readouterr().out
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2


def test_missing_ray_is_one_line(grid, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # 'import ray' raises ImportError, as without the extra
    assert main(["sweep", str(grid), "-o", str(tmp_path / "o"), "--backend", "ray", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'dcpsim[ray]'" in err[0]
    assert not (tmp_path / "o").exists()  # nothing started
    assert main(["sweep", str(grid), "--address", "auto"]) == 2
    assert capsys.readouterr().err.strip() == "dcpsim sweep: error: --address auto: only with --backend ray"
    with pytest.raises(ValueError, match="backend 'dask' is not known; valid: process, ray"):
        run_sweep(load_sweep(grid), tmp_path / "o", backend="dask")


def test_ray_address_reachability():
    from dcpsim.experiments.sweep.ray import check_reachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")  # something answers: left to Ray
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    msg = rf"--address ray://127.0.0.1:{port}: no Ray cluster answers there"
    with pytest.raises(ScenarioError, match=msg):
        check_reachable(f"ray://127.0.0.1:{port}", timeout_s=2)
    check_reachable("auto")  # not HOST:PORT: Ray finds it
