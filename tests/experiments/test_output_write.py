"""experiments.output.write: outputs checked up front, written atomically and together; a full disk, a read-only
directory or a non-finite number is one line and leaves every earlier output as it was."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.errors import OutputError
from dcpsim.experiments.output.write import Outputs, dumps_json, nonfinite_field, write_text

SIM = ["simulate", "--policy", "static-cp", "--global-batch-tokens", "1048576", "--no-progress"]
OLD = {"plan.json": b'{"old": "plan"}', "tl.csv": b"old,timeline\n", "trace.json": b'{"old": "trace"}'}


def _earlier(tmp_path: Path) -> list[str]:
    for name, data in OLD.items():
        (tmp_path / name).write_bytes(data)
    return ["--plan-out", str(tmp_path / "plan.json"), "--timeline-out", str(tmp_path / "tl.csv"),
            "--chrome-trace", str(tmp_path / "trace.json")]


def _intact(tmp_path: Path) -> None:
    for name, data in OLD.items():
        assert (tmp_path / name).read_bytes() == data, f"{name} changed by a failed command"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(OLD), "a temporary file was left behind"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("call", ["fsync", "write"])
def test_a_full_disk_leaves_every_earlier_output_intact(tmp_path, capsys, monkeypatch, call):
    outs = _earlier(tmp_path)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, call, full)  # os.write: the plan's bytes; os.fsync: every file, before any moves
    assert main([*SIM, *outs]) == 2
    err = _one_line(capsys)
    assert "No space left on device" in err and "cannot write" in err and "plan.json (--plan-out)" in err
    monkeypatch.undo()
    _intact(tmp_path)


def test_a_read_only_directory_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    outs = _earlier(tmp_path)
    tmp_path.chmod(0o555)
    real_open = os.open

    def read_only(path, flags, *a, **k):  # as root, chmod does not stop a write: refuse it as a read-only mount
        if flags & os.O_CREAT and Path(path).parent == tmp_path:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", read_only)
    ran = []
    monkeypatch.setattr("dcpsim.experiments.runner.simulate_policy", lambda *a, **k: ran.append(1))
    try:
        assert main([*SIM, *outs]) == 2
    finally:
        tmp_path.chmod(0o755)
    err = _one_line(capsys)
    assert f"--plan-out {tmp_path / 'plan.json'}: cannot create a file in {tmp_path}: Read-only file system" in err
    assert not ran, "the simulation ran although its outputs could not be written"
    monkeypatch.undo()
    _intact(tmp_path)


def test_all_outputs_land_together(tmp_path, capsys):
    outs = _earlier(tmp_path)
    assert main([*SIM, *outs]) == 0
    from dcpsim.policies import Plan

    assert Plan.from_json((tmp_path / "plan.json").read_text()).num_microbatches >= 1
    assert (tmp_path / "tl.csv").read_text().startswith("stage,rank,")
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(OLD)


def test_a_failing_command_moves_nothing(tmp_path):
    (tmp_path / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), Outputs({"-a": tmp_path / "a.txt", "-b": tmp_path / "b.txt"}) as outs:
        outs.write_text("-a", "new")
        raise RuntimeError("the command failed after writing its first output")
    assert (tmp_path / "a.txt").read_text() == "old" and sorted(os.listdir(tmp_path)) == ["a.txt"]


def test_non_finite_numbers_are_refused_naming_the_field():
    assert nonfinite_field({"results": [{"mfu": 0.4}, {"mfu": 0.5, "bubble": float("inf")}]}) == \
        "results[1].bubble = inf"
    with pytest.raises(OutputError, match=r"--json: refusing to write a non-finite number, which JSON cannot "
                                          r"hold: results\[0\]\.mfu = nan"):
        dumps_json({"results": [{"mfu": float("nan")}]}, "--json")
    import numpy as np

    with pytest.raises(OutputError, match=r"x\[2\] = -inf"):
        dumps_json({"x": np.array([1.0, 2.0, -np.inf])}, "out")
    assert dumps_json({"b": np.float64(1.5), "a": (1, 2)}, "out", sort_keys=True) == '{"a": [1, 2], "b": 1.5}'


def test_simulate_json_and_chrome_trace_refuse_a_non_finite_result(tmp_path, capsys, monkeypatch):
    from dcpsim.experiments.runner import RunSummary

    real = RunSummary.to_dict
    monkeypatch.setattr(RunSummary, "to_dict", lambda self: real(self) | {"mfu": float("nan")})
    assert main([*SIM, "--json"]) == 2
    assert "--json: refusing to write a non-finite number, which JSON cannot hold: results[0].mfu = nan" in \
        _one_line(capsys)
    (tmp_path / "trace.json").write_text("old")
    assert main([*SIM, "--chrome-trace", str(tmp_path / "trace.json")]) == 2
    err = _one_line(capsys)
    assert "--chrome-trace: refusing to write a non-finite number" in err and "metadata.metrics.mfu = nan" in err
    assert (tmp_path / "trace.json").read_text() == "old" and len(os.listdir(tmp_path)) == 1


def test_write_text_refuses_an_input(tmp_path):
    (tmp_path / "in.csv").write_text("length\n1\n")
    with pytest.raises(OutputError, match="that is the command's input"):
        write_text(tmp_path / "in.csv", "x", "-o", inputs={"trace": tmp_path / "in.csv"})
    assert (tmp_path / "in.csv").read_text() == "length\n1\n"


def test_no_value_is_null_where_a_document_means_it():
    from dcpsim.experiments.output.write import nulls_for_nonfinite

    doc = {"spread": {"a": float("nan"), "b": 0.02}, "x": [1.0, float("inf")], "n": 3}
    assert dumps_json(nulls_for_nonfinite(doc), "out", sort_keys=True) == \
        '{"n": 3, "spread": {"a": null, "b": 0.02}, "x": [1.0, null]}'
    assert doc["spread"]["a"] != doc["spread"]["a"]  # the document itself is left as it was
