"""The run-log format: round trip, and one clear line (exit 2, nothing written) for each malformed log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.replay.runlog import LogError, read_log, write_log
from tests.replay.conftest import iteration, job_record, write_jsonl


def test_round_trip(hand_log: Path, tmp_path: Path) -> None:
    log = read_log(hand_log)
    assert log.pool == 2 and len(log.iterations) == 2
    assert log.iterations[1].microbatches[0][1].docs == (8192, 8192)
    assert log.iterations[0].tokens == 4096 + 8192 + 12288
    out = tmp_path / "again.jsonl"
    write_log(log, out)
    assert read_log(out) == log


def _bad(job=None, its=None):
    return [job_record(**(job or {}))] + (its if its is not None else [iteration()])


CASES = {
    "missing measured time": (_bad(its=[{k: v for k, v in iteration().items() if k != "measured_s"}]),
                              "measured_s = None"),
    "missing job field": ([{"kind": "job", "job": {"model": "llama3-8b", "tp": 8}}, iteration()], "job.gpu"),
    "unknown model": (_bad(job={"model": "llama9-1t"}), "unknown model preset 'llama9-1t'"),
    "documents over memory": (_bad(its=[iteration(docs=((4_000_000,), (1024,)))]), "memory budget"),
    "zero time": (_bad(its=[iteration(measured_s=0.0)]), "measured_s = 0.0"),
    "negative time": (_bad(its=[iteration(measured_s=-1.0)]), "measured_s = -1.0"),
    "no documents": (_bad(its=[{"kind": "iteration", "step": 0, "measured_s": 0.5, "microbatches": []}]),
                     "microbatches = []"),
    "empty document list": (_bad(its=[iteration(docs=((), (1024,)))]), "docs = []"),
    "no iterations": (_bad(its=[]), "no iteration records"),
    "rank outside the pool": (_bad(its=[iteration(docs=((1024,), (1024,), (1024,)))]), "ranks = [2]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_log_is_one_line_exit_2_nothing_written(case: str, tmp_path: Path, capsys) -> None:
    records, needle = CASES[case]
    log = write_jsonl(tmp_path / "bad.jsonl", records)
    png, cal = tmp_path / "out.png", tmp_path / "cal.json"
    assert main(["replay", str(log), "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert main(["calibrate", "--runs", str(log), "-o", str(cal)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert list(tmp_path.iterdir()) == [log]


def test_not_json_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(job_record()) + "\n{not json\n")
    with pytest.raises(LogError, match=r"x.jsonl:2: not valid JSON"):
        read_log(p)
