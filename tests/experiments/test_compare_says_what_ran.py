"""dcpsim compare states what ran: a trace with fewer batches than --iterations is a one-line warning and is
recorded in --json (iterations_run, warnings); the header names the batch size that formed the batches."""

from __future__ import annotations

import json

from dcpsim.experiments.cli import main


def test_a_shortfall_of_iterations_is_a_warning_and_in_the_json(tmp_path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("length\n1000\n2000\n30000\n")
    assert main(["compare", "--trace", str(trace), "--iterations", "20", "--policies", "static-cp", "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["iterations_run"] == 1 and doc["scenario"]["iterations"] == 20
    assert doc["warnings"] == [f"the trace {trace} holds 1 global batch(es): ran 1 of the 20 iterations asked"]
    assert out.err.strip().splitlines() == [f"warning: {doc['warnings'][0]}"]


def test_no_warning_and_no_extra_keys_when_it_ran_as_asked(capsys) -> None:
    assert main(["compare", "--policies", "static-cp", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "warnings" not in doc and "iterations_run" not in doc


def test_the_header_names_the_sequence_count_when_it_formed_the_batches(capsys) -> None:
    assert main(["compare", "--policies", "static-cp", "--global-batch-seqs", "512", "--no-progress"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "512 sequences/batch" in header and "tokens/batch" not in header
