"""``dcpsim reproduce``: every shipped published measurement within the tolerance written beside the data
(cost_models/data/reference/tolerances.csv)."""

import json
from dataclasses import replace

import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.studies import reproduction


@pytest.fixture(scope="module")
def cases():
    return reproduction.all_cases()


def test_every_shipped_measurement_is_within_its_tolerance(cases):
    bad = [f"{c.suite} {c.case}: predicted {c.predicted:.4g}, measured {c.measured:.4g}, error {c.error:+.1%} "
           f"> {c.tolerance:.0%}" for c in cases if not c.ok]
    assert bad == []


def test_every_suite_has_cases_and_a_written_tolerance(cases):
    tol = reproduction.tolerances()
    suites = {c.suite for c in cases}
    assert suites == {"attention:fa2", "attention:fa3", "attention:cudnn", "nccl", "cp_benchmark",
                      "ring_attention", "cp_scaling"}
    assert suites <= set(tol)
    counts = {s: sum(c.suite == s for c in cases) for s in suites}
    # 60 published rows - 18 at head dim 64/256 = 42 FA-paper rows at d 128 (FA3 18, FA2 18, cuDNN 9.1 6),
    # + 20 cudnn-frontend rows (H200)
    assert (counts["attention:fa3"], counts["attention:fa2"], counts["attention:cudnn"]) == (18, 18, 6 + 20)
    assert counts["nccl"] == 99 and counts["cp_benchmark"] == 2


def test_the_te_cp_benchmark_speedups_fall_in_the_measured_ranges(cases):
    te = {c.case.split()[0]: c.predicted for c in cases if c.suite == "cp_benchmark"}
    assert 3.98 * 0.9 <= te["1x512K"] <= 4.23 * 1.1
    assert 3.03 * 0.9 <= te["256x2K"] <= 3.41 * 1.1
    assert te["256x2K"] < te["1x512K"]  # short documents scale worse: latency and launches


def test_json_and_table(capsys):
    assert main(["reproduce", "--suite", "cp_benchmark", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["out_of_tolerance"] == 0 and len(out["cases"]) == 2
    assert set(out["cases"][0]) == {"suite", "case", "predicted", "measured", "error", "tolerance", "unit", "ok",
                                    "measured_range"}
    assert main(["reproduce", "--suite", "nccl"]) == 0
    text = capsys.readouterr().out
    assert "99 of 99 within tolerance" in text and "median |error|" in text


def test_a_wrong_model_is_caught(monkeypatch, capsys):
    """Halving every NVLink bandwidth puts the NCCL suite out of tolerance and the command exits 1."""
    real = reproduction.default_calibration

    def slow(gpu):
        cal = real(gpu)
        return replace(cal, comm={k: replace(v, busbw_gbs=v.busbw_gbs / 2) for k, v in cal.comm.items()})

    monkeypatch.setattr(reproduction, "default_calibration", slow)
    assert main(["reproduce", "--suite", "nccl"]) == 1
    assert "OUT" in capsys.readouterr().out


def test_a_prediction_inside_a_measured_range_reads_within_range(cases, capsys):
    """TE's CP benchmark is a measured range: inside it the table says 'within range' (not '+0.0%') and shows
    the range; outside it the signed distance to the range over its middle."""
    te = {c.case.split()[0]: c for c in cases if c.suite == "cp_benchmark"}
    assert te["1x512K"].measured_range == (3.98, 4.23) and te["256x2K"].measured_range == (3.03, 3.41)
    assert main(["reproduce", "--suite", "cp_benchmark"]) == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("cp_bench")}
    for name, c in te.items():
        lo, hi = c.measured_range
        assert f"{lo:.4g}–{hi:.4g}" in rows[name]
        if lo <= c.predicted <= hi:
            assert c.in_range and c.error == 0.0 and "within range" in rows[name]
        else:
            expected = (c.predicted - (lo if c.predicted < lo else hi)) / ((lo + hi) / 2)
            assert not c.in_range and c.error == pytest.approx(expected) and f"{c.error:+.1%}" in rows[name]
    assert all(c.measured_range is None and not c.in_range for c in cases if c.suite != "cp_benchmark")
