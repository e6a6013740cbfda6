"""Sweep cache keys: a changed trace file or code version recomputes exactly what it affects."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pandas as pd
import pytest

import dcpsim.experiments.sweep.driver as sweep_mod
import dcpsim.experiments.sweep.grid as grid_mod
from dcpsim.experiments.sweep.driver import run_sweep
from dcpsim.experiments.sweep.grid import load_sweep
from dcpsim.experiments.sweep.keys import file_digest, point_files, source_digest

BASE = """
model = "llama3-8b"
gpu = "h200"
tp = 1
pp = 2
pool = 8
context_len = 32768
global_batch_tokens = 131072
iterations = 1
policies = ["static-cp", "mcore-dcp"]
"""

GRID = """
base = "base.toml"
seeds = [0]

[grid]
trace = ["a.csv", "b.csv"]
pool = [4, 8]
"""


def lengths_csv(lengths):
    return "length\n" + "".join(f"{n}\n" for n in lengths)


@pytest.fixture
def grid(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # trace paths are relative to the working directory, as for every command
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    (tmp_path / "a.csv").write_text(lengths_csv([30000, 20000, 9000, 4000] * 4))
    (tmp_path / "b.csv").write_text(lengths_csv([8000] * 16))
    return tmp_path / "grid.toml"


@pytest.fixture
def counting(monkeypatch):
    """The (trace, pool, policy) of every task computed (workers=1 runs them in this process)."""
    calls = []
    real = sweep_mod.run_task

    def run_task(task):
        calls.append((task.scenario["trace"], task.scenario["pool"], task.policy))
        return real(task)

    monkeypatch.setattr(sweep_mod, "run_task", run_task)
    return calls


def test_changed_trace_file_recomputes_only_its_points(grid, tmp_path, counting):
    out = tmp_path / "out"
    first = run_sweep(load_sweep(grid), out, workers=1)
    assert first.computed == 8 and first.failed == 0 and len(counting) == 8
    before = first.read_table().set_index(["trace", "pool", "policy"])
    counting.clear()
    (tmp_path / "b.csv").write_text(lengths_csv([4000] * 16))  # same name, new content
    second = run_sweep(load_sweep(grid), out, workers=1)
    assert sorted(counting) == sorted(("b.csv", p, pol) for p in (4, 8) for pol in ("static-cp", "mcore-dcp"))
    assert second.computed == 4 and second.reused == 4
    after = second.read_table().set_index(["trace", "pool", "policy"])
    # a.csv's rows are the stored ones; b.csv's are results of the new file: one batch of 16 x 4,000 tokens
    # instead of 16 x 8,000 (both fit the 131,072-token budget), so half the tokens per iteration
    pd.testing.assert_frame_equal(after.loc["a.csv"], before.loc["a.csv"])
    assert (after.loc["b.csv", "key"] != before.loc["b.csv", "key"]).all()
    tokens = after.tokens_per_s * after.iteration_time_s
    assert tokens.loc["b.csv"].to_numpy() == pytest.approx([64000] * 4, rel=1e-9)
    old_tokens = before.tokens_per_s * before.iteration_time_s
    assert old_tokens.loc["b.csv"].to_numpy() == pytest.approx([128000] * 4)
    # rewriting a file with the same bytes (a new mtime) recomputes nothing
    counting.clear()
    (tmp_path / "a.csv").write_bytes((tmp_path / "a.csv").read_bytes())
    assert run_sweep(load_sweep(grid), out, workers=1).computed == 0 and counting == []


def test_changed_code_version_recomputes_everything(grid, tmp_path, counting, monkeypatch):
    out = tmp_path / "out"
    first = run_sweep(load_sweep(grid), out, workers=1).read_table()
    counting.clear()
    for mod in (grid_mod, sweep_mod):  # the tasks' keys (grid) and what the driver logs and writes
        monkeypatch.setattr(mod, "code_version", lambda: "9.9.9+gdeadbeef")
    again = run_sweep(load_sweep(grid), out, workers=1)
    assert again.computed == 8 and len(counting) == 8
    assert set(again.read_table()["key"]).isdisjoint(first["key"])
    assert run_sweep(load_sweep(grid), out, workers=1).computed == 0  # same code again: all stored


def test_point_files_hash_the_named_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_bytes(b"length\n100\n")
    (tmp_path / "cal.json").write_bytes(b"{}")
    assert file_digest(tmp_path / "t.csv") == hashlib.sha256(b"length\n100\n").hexdigest()
    assert point_files({"trace": "t.csv", "calibration": "cal.json"}) == {
        "trace": hashlib.sha256(b"length\n100\n").hexdigest(),
        "calibration": hashlib.sha256(b"{}").hexdigest()}
    # presets and the shipped calibration are code, not files
    assert point_files({"trace": "256k", "calibration": None, "gpu": "h200"}) == {}
    assert point_files({"trace": "lognormal:mean=1024,sigma=1.5"}) == {}  # "1.5" is no file suffix here
    (tmp_path / "gpu.toml").write_bytes(b"base = 'h100'\n")
    assert point_files({"gpu": "gpu.toml"}) == {"gpu": hashlib.sha256(b"base = 'h100'\n").hexdigest()}
    assert point_files({"trace": "nope.csv"}) == {"trace": "missing"}
    # a mixture's file components are hashed too (a changed component file must change the key)
    (tmp_path / "u.csv").write_bytes(b"length\n7\n")
    mix = "mix:0.5*t.csv+0.3*lognormal:median=2048,sigma=1+0.2*u.csv"
    assert point_files({"trace": mix}) == {"trace[0]": hashlib.sha256(b"length\n100\n").hexdigest(),
                                           "trace[1]": hashlib.sha256(b"length\n7\n").hexdigest()}
    (tmp_path / "u.csv").write_bytes(b"length\n8\n")
    assert point_files({"trace": mix})["trace[1]"] == hashlib.sha256(b"length\n8\n").hexdigest()
    assert point_files({"trace": "mix:0.9*lognormal:median=2048,sigma=1+0.1*32k"}) == {}  # no file in it
    cache: dict[str, str] = {}
    point_files({"trace": "t.csv"}, cache)
    assert cache == {str((tmp_path / "t.csv").resolve()): hashlib.sha256(b"length\n100\n").hexdigest()}


def test_source_digest_is_the_content_of_the_package_files(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "mod.py").write_text("x = 1\n")
    (pkg / "data" / "calibration_h100.json").write_text('{"a": 1}\n')
    first = source_digest([pkg])
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"compiled")
    assert source_digest([pkg]) == first  # compiled caches do not count
    other = tmp_path / "clone" / "pkg"  # the same files elsewhere (another clone, a wheel): the same digest
    shutil.copytree(pkg, other)
    assert source_digest([other]) == first
    (pkg / "data" / "calibration_h100.json").write_text('{"a": 2}\n')  # a shipped data file counts
    edited = source_digest([pkg])
    (pkg / "new.py").write_text("y = 1\n")  # so does a new module
    assert len({first, edited, source_digest([pkg])}) == 3
    (pkg / "new.py").unlink()
    (pkg / "data" / "calibration_h100.json").write_text('{"a": 1}\n')
    assert source_digest([pkg]) == first  # back to the same content: the stored results match again
    (pkg / "mod.py").rename(pkg / "renamed.py")
    assert source_digest([pkg]) != first  # a file's path counts, not only its bytes


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_commit_that_changes_no_package_file_changes_no_key(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text("x = 1\n")
    before = source_digest([pkg])
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    assert source_digest([pkg]) == before  # .git sits outside the package folder; the commit is not hashed


def test_code_version_names_package_and_dependencies():
    import numpy
    import scipy
    import simpy

    import dcpsim
    from dcpsim.experiments.sweep.keys import code_version, runtime_versions

    v = code_version()
    assert v.startswith(dcpsim.__version__)
    assert v.endswith(f"(numpy {numpy.__version__}, scipy {scipy.__version__}, simpy {simpy.__version__})")
    assert runtime_versions() == f"dcpsim {dcpsim.__version__}, numpy {numpy.__version__}, " \
                                 f"scipy {scipy.__version__}, simpy {simpy.__version__}"
