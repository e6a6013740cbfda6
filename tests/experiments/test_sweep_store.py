"""A sweep's store: one sweep per directory, records checked on reuse, a trace rewritten mid-sweep leaves no
stale row, a huge grid refused up front with the limit named."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

import dcpsim.experiments.sweep.driver as sweep_mod
from dcpsim.experiments.cli import main
from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.sweep.driver import run_sweep
from dcpsim.experiments.sweep.grid import MAX_TASKS, load_sweep
from dcpsim.experiments.sweep.store import load_record, record_problem
from tests.experiments.test_sweep_keys import BASE, GRID, lengths_csv


@pytest.fixture
def grid(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    (tmp_path / "a.csv").write_text(lengths_csv([30000, 20000, 9000, 4000] * 4))
    (tmp_path / "b.csv").write_text(lengths_csv([8000] * 16))
    return tmp_path / "grid.toml"


def test_a_second_different_sweep_into_the_same_directory_is_refused(grid, tmp_path, capsys):
    out = tmp_path / "out"
    run_sweep(load_sweep(grid), out, workers=1)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other = tmp_path / "other.toml"
    other.write_text(GRID.replace("pool = [4, 8]", "pool = [4]"))
    assert main(["sweep", str(other), "-o", str(out), "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"-o {out}: holds the results of another sweep ({grid}, 4 points)" in err
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing touched
    assert run_sweep(load_sweep(grid), out, workers=1).computed == 0  # the same sweep resumes as before


def test_an_edited_record_is_run_again_not_mixed_in(grid, tmp_path):
    out = tmp_path / "out"
    first = run_sweep(load_sweep(grid), out, workers=1).read_table()
    victim = sorted((out / "points").glob("*.json"))[0]
    rec = json.loads(victim.read_text())
    assert record_problem(rec, victim.stem) is None
    rec["summary"]["iteration_time_s"] = "fast"  # a string where a number belongs
    victim.write_text(json.dumps(rec))
    assert load_record(out, victim.stem) == (None, "summary.iteration_time_s = 'fast' is not a number")
    said: list[str] = []
    again = run_sweep(load_sweep(grid), out, workers=1, log=said.append)
    assert again.computed == 1 and again.reused == 7
    assert any("1 stored record(s) are malformed and run again" in m and victim.stem in m for m in said)
    table = again.read_table()
    assert table["iteration_time_s"].dtype == float
    pd.testing.assert_frame_equal(first.drop(columns=["elapsed_s", "scheduling_time_s"]),
                                  table.drop(columns=["elapsed_s", "scheduling_time_s"]))


@pytest.mark.parametrize("rec, problem", [
    ([], "not a JSON object"),
    ({"key": "other", "error": "x", "elapsed_s": 1.0}, "key = 'other' is not its file's name"),
    ({"key": "k", "error": 3, "elapsed_s": 1.0}, "error = 3 is not a string"),
    ({"key": "k", "error": "x", "elapsed_s": "1"}, "elapsed_s = '1' is not a number"),
    ({"key": "k", "error": None, "summary": None, "elapsed_s": 1.0}, "neither a summary nor an error"),
    ({"key": "k", "error": None, "summary": {"policy": "hydra"}, "elapsed_s": 1.0}, "summary.iteration_time_s"),
])
def test_record_problems_name_the_field(rec, problem):
    assert problem in (record_problem(rec, "k") or "")


def test_a_trace_rewritten_during_the_sweep_leaves_no_stale_row(grid, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real = sweep_mod.run_task
    calls = []

    def run_task(task):  # the trace b.csv is rewritten while the third task runs
        calls.append(task.key)
        if len(calls) == 3:
            (tmp_path / "b.csv").write_text(lengths_csv([4000] * 16))
        return real(task)

    monkeypatch.setattr(sweep_mod, "run_task", run_task)
    with pytest.raises(ScenarioError, match=r"trace file b\.csv changed while the sweep ran: .* not written"):
        run_sweep(load_sweep(grid), out, workers=1)
    assert not (out / "results.parquet").exists()
    monkeypatch.setattr(sweep_mod, "run_task", real)
    final = run_sweep(load_sweep(grid), out, workers=1)  # the rerun: every row of the files as they are now
    fresh = run_sweep(load_sweep(grid), tmp_path / "fresh", workers=1)
    cols = ["key", "policy", "trace", "pool", "iteration_time_s", "tokens_per_s", "error"]
    pd.testing.assert_frame_equal(final.read_table()[cols], fresh.read_table()[cols])


def test_a_huge_grid_is_refused_up_front_with_the_limit(tmp_path, capsys):
    g = tmp_path / "huge.toml"
    g.write_text('base = "default"\nseeds = ' + str(list(range(1000))) + "\n[grid]\npool = "
                 + str(list(range(1, 101))) + "\nmax_tokens_per_rank = " + str(list(range(1024, 1124))) + "\n")
    t0 = time.perf_counter()
    with pytest.raises(ScenarioError, match=f"10,000,000 points x 3 policies = 30,000,000 tasks is above the "
                                            f"limit of {MAX_TASKS:,} tasks"):
        load_sweep(g)
    assert time.perf_counter() - t0 < 30  # no task was built
    assert main(["sweep", str(g), "-o", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "tasks is above the limit" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_first_line_comes_before_the_tasks_are_built_and_names_the_cap(tmp_path, monkeypatch, capsys):
    from dcpsim.experiments.sweep import driver
    from dcpsim.experiments.sweep.grid import Sweep

    class Stop(Exception):
        pass

    said: list[str] = []
    seen_when_built: list[int] = []
    real = Sweep.tasks

    def tasks(self):
        seen_when_built.append(len(said))
        return real(self)

    monkeypatch.setattr(Sweep, "tasks", tasks)
    g = tmp_path / "g.toml"
    g.write_text('base = "default"\npolicies = ["static-cp"]\n[set]\nglobal_batch_tokens = 262144\n'
                 'context_len = 32768\n[grid]\npool = [4, 8]\n')
    driver.run_sweep(load_sweep(g), tmp_path / "out", workers=1, log=said.append)
    assert seen_when_built == [1]   # one line was out before any task was built
    assert said[0] == f"2 points x 1 policies = 2 tasks (at most {MAX_TASKS:,} per sweep)"
    assert said[1].startswith("0 stored, 2 to run on 1 worker(s); code ")
    # a big grid's first line says how long building takes (KEY_S per task), before building
    big = tmp_path / "big.toml"
    big.write_text('base = "default"\npolicies = ["static-cp", "hydra"]\nseeds = ' + str(list(range(100)))
                   + "\n[grid]\nmax_tokens_per_rank = " + str(list(range(20000, 20100))) + "\n")

    def stop(self):
        raise Stop

    monkeypatch.setattr(Sweep, "tasks", stop)
    said.clear()
    with pytest.raises(Stop):
        driver.run_sweep(load_sweep(big), tmp_path / "big-out", workers=1, log=said.append)
    assert said == [f"10000 points x 2 policies = 20000 tasks (at most {MAX_TASKS:,} per sweep); making their "
                    f"keys, about {20000 * driver.KEY_S:.0f} s"]
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert f"at most {MAX_TASKS:,} tasks" in " ".join(capsys.readouterr().out.split())
