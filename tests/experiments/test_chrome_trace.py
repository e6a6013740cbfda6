"""Chrome-trace export: valid JSON, exactly one "X" slice per timeline row, names and metadata."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.output.chrome_trace import timeline_to_chrome
from dcpsim.experiments.runner import PolicySpec, run_policy
from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO


@pytest.fixture(scope="module")
def result():
    sc = DEFAULT_SCENARIO
    return run_policy(PolicySpec("mcore-dcp"), sc.batches(), sc.cost_model()).iterations[0]


def test_one_slice_per_timeline_row(result):
    tl = result.timeline
    trace = json.loads(json.dumps(timeline_to_chrome(tl, label="mcore-dcp")))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(tl)
    assert [e["pid"] for e in xs] == tl["stage"].tolist()
    assert [e["tid"] for e in xs] == tl["rank"].tolist()
    assert np.allclose([e["ts"] for e in xs], tl["start"] * 1e6, atol=1e-3)
    assert np.allclose([e["dur"] for e in xs], tl.duration * 1e6, atol=1e-3)
    assert all(e["dur"] >= 0 for e in xs)
    names = {e["name"] for e in xs}
    assert {"grad sync", "optimizer step"} <= names
    assert all(n.startswith(("F mb", "B mb")) or n in {"cp comm", "pp wait", "dp wait", "grad sync",
                                                        "optimizer step"} for n in names)
    f = next(e for e in xs if e["name"].startswith("F mb"))
    assert f["name"] == f"F mb{f['args']['microbatch']}"


def test_process_and_thread_names(result):
    tl = result.timeline
    ev = timeline_to_chrome(tl)["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert procs == {s: f"stage {s}" for s in range(tl.num_stages)}
    assert threads == set(zip(tl["stage"].tolist(), tl["rank"].tolist()))


def test_simulate_writes_a_chrome_trace(tmp_path, capsys):
    out = tmp_path / "trace.json"
    rc = main(["simulate", "--policy", "static-cp", "--chrome-trace", str(out), "--no-progress",
               "--global-batch-tokens", str(1 << 20)])
    assert rc == 0
    trace = json.loads(out.read_text())
    assert trace["metadata"]["policy"] == "static-cp"
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
