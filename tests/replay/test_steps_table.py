"""``dcpsim reproduce --steps``: the end-to-end table's columns, and its numbers are replay's and the
``calibrate --runs`` fit's (computed live), on a subsample of the shipped datasets (a 20-iteration DistCA file and
the 10-iteration Megatron-LM case, twice under two names for a GPU with two datasets) to stay fast."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dcpsim.cost_models import default_calibration, get_gpu
from dcpsim.experiments.cli import main
from dcpsim.experiments.replay import validation
from dcpsim.experiments.replay.distca import import_distca
from dcpsim.experiments.replay.fit import fit_runs
from dcpsim.experiments.replay.replay import replay
from dcpsim.experiments.replay.stats import error_stats
from tests.replay.conftest import SMALL_FILE


@pytest.fixture(scope="module")
def subsample():
    (mega,) = validation.megatron_logs()
    logs = [import_distca(SMALL_FILE), mega, replace(mega, dataset=mega.dataset + "/again")]
    return logs, validation.steps_table(logs, folds=5)


def test_one_row_per_dataset_and_one_per_gpu_with_the_columns(subsample) -> None:
    logs, table = subsample
    names = [r.dataset for r in table.rows]
    assert names == [logs[0].dataset, logs[1].dataset, logs[2].dataset, "h100: all"]
    assert validation.COLUMNS == ("dataset", "gpu", "calibration", "n", "in-sample MAPE", "CV MAPE", "mean error",
                                  "corr", "importer assumes")
    md = validation.markdown(table).splitlines()
    assert md[0] == "| " + " | ".join(validation.COLUMNS) + " |" and len(md) == 2 + len(table.rows)
    assert all(line.count("|") == len(validation.COLUMNS) + 1 for line in md)
    assert [r.in_sample.n for r in table.rows] == [20, 10, 10, 20]
    assert table.rows[0].assumes == validation.ASSUMES["baseline"] and table.rows[0].gpu == "h200"
    assert table.rows[1].assumes == validation.ASSUMES["megatron"] and table.rows[1].gpu == "h100"


def test_numbers_equal_replay_and_the_runs_fit(subsample) -> None:
    logs, table = subsample
    rows = {r.dataset: r for r in table.rows}
    same = lambda a, b: repr(a) == repr(b)  # noqa: E731 (nan-aware: a constant run's corr is nan)
    for gpu_name, group in (("h200", logs[:1]), ("h100", logs[1:])):
        gpu = get_gpu(gpu_name)
        cal = default_calibration(gpu)
        fit = fit_runs(group, cal, gpu, knobs=validation.SHIPPED_KNOBS, folds=5)
        pooled = []
        for log in group:
            rep = replay(log)  # the log's GPU, its shipped calibration: what 'dcpsim replay' prints
            pooled += rep
            s = error_stats([r.predicted_s for r in rep], [r.measured_s for r in rep])
            row = rows[log.dataset]
            assert row.calibration == cal.name and same(row.in_sample, s)
            assert same(row.cv, fit.cv[log.dataset])
        if len(group) > 1:
            s = error_stats([r.predicted_s for r in pooled], [r.measured_s for r in pooled])
            assert same(rows[f"{gpu_name}: all"].in_sample, s) and same(rows[f"{gpu_name}: all"].cv, fit.cv["all"])
    # the refit helps where it can: held-out error below the shipped calibration's on the DistCA file
    assert rows[logs[0].dataset].cv.mape < rows[logs[0].dataset].in_sample.mape


def test_cli_prints_the_table_and_writes_the_docs(subsample, tmp_path: Path, monkeypatch, capsys) -> None:
    logs, table = subsample
    monkeypatch.setattr(validation, "steps_table", lambda folds=5: table)
    assert main(["reproduce", "--steps", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["folds"] == 5 and [r["dataset"] for r in out["rows"]] == [r.dataset for r in table.rows]
    assert out["rows"][0]["in_sample"]["mape"] == table.rows[0].in_sample.mape
    doc = tmp_path / "validation.md"
    doc.write_text(f"intro\n{validation.BEGIN}\nold table\n{validation.END}\nafter\n")
    assert main(["reproduce", "--steps", "--markdown", "--write-docs", str(doc)]) == 0
    printed = capsys.readouterr().out
    assert validation.markdown(table) in printed
    assert doc.read_text() == f"intro\n{validation.BEGIN}\n{validation.markdown(table)}\n{validation.END}\nafter\n"
    assert (tmp_path / validation.SCATTER).stat().st_size > 0


def test_bad_usage_is_one_line_and_exit_2(subsample, tmp_path: Path, monkeypatch, capsys) -> None:
    _, table = subsample
    with pytest.raises(validation.LogError, match="--folds = 1"):
        validation.steps_table([], folds=1)
    monkeypatch.setattr(validation, "steps_table", lambda folds=5: table)
    doc = tmp_path / "plain.md"
    doc.write_text("no markers\n")
    assert main(["reproduce", "--steps", "--write-docs", str(doc)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no <!-- steps-table -->" in err and str(doc) in err
    assert doc.read_text() == "no markers\n" and not (tmp_path / validation.SCATTER).exists()
    assert main(["reproduce", "--markdown"]) == 2
    assert "--steps" in capsys.readouterr().err
    assert main(["reproduce", "--steps", "--suite", "nccl"]) == 2
