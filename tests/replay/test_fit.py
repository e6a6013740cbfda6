"""calibrate --runs: the fit recovers known efficiencies from synthetic steps and writes a calibration that
--calibration reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dcpsim.cost_models import default_calibration, get_gpu
from dcpsim.experiments.cli import main
from dcpsim.experiments.replay.fit import KNOBS, calibration_with, fit_runs
from dcpsim.experiments.replay.replay import cost_model_of, predicted
from dcpsim.experiments.replay.runlog import Iteration, read_log
from tests.replay.conftest import iteration, job_record, write_jsonl

DOCS = [((65536,), (8192,) * 8), ((32768, 32768), (4096,) * 16), ((16384,) * 4, (65536,)),
        ((1024,) * 64, (49152, 16384)), ((131072,), (65536, 65536)), ((8192,) * 16, (131072,))]


def _synthetic(tmp_path: Path, truth: dict[str, float]) -> Path:
    """A log whose measured times are the simulation under ``truth``."""
    records = [job_record()] + [iteration(i, 1.0, d) for i, d in enumerate(DOCS)]
    log = read_log(write_jsonl(tmp_path / "a.jsonl", records))
    base = default_calibration(get_gpu("h200"))
    times = predicted(log, cost_model_of(log, calibration_with(base, truth)))
    its = [Iteration(it.step, float(t), it.microbatches) for it, t in zip(log.iterations, times)]
    from dcpsim.experiments.replay.runlog import write_log

    write_log(log.with_iterations(its), tmp_path / "synthetic.jsonl")
    return tmp_path / "synthetic.jsonl"


def test_calibration_with_scales_what_it_names() -> None:
    base = default_calibration(get_gpu("h200"))
    cal = calibration_with(base, {"attention_scale": 0.5, "gemm_peak_tflops": 400.0, "nvlink_scale": 0.5})
    assert cal.gemm.peak_tflops == 400.0
    assert cal.attn_fwd.peak_tflops == pytest.approx(base.attn_fwd.peak_tflops / 2, rel=1e-5)
    assert cal.attention["cudnn"].fwd_causal.peak_tflops == pytest.approx(
        base.attention["cudnn"].fwd_causal.peak_tflops / 2, rel=1e-5)
    nvlink = base.link("all_gather", "nvlink").busbw_gbs
    assert cal.link("all_gather", "nvlink").busbw_gbs == pytest.approx(nvlink / 2, rel=1e-5)
    assert cal.link("all_gather", "network").busbw_gbs == base.link("all_gather", "network").busbw_gbs
    assert calibration_with(base, {}).to_dict() == base.to_dict()


def test_fit_recovers_known_efficiencies(tmp_path: Path) -> None:
    truth = {"gemm_peak_tflops": 500.0, "attention_scale": 0.7}
    log = read_log(_synthetic(tmp_path, truth))
    base = default_calibration(get_gpu("h200"))
    res = fit_runs([log], base, get_gpu("h200"), knobs=list(truth), folds=3, prior=0.0)
    assert res.values["gemm_peak_tflops"] == pytest.approx(500.0, rel=0.01)
    assert res.values["attention_scale"] == pytest.approx(0.7, rel=0.01)
    assert res.in_sample["all"].mape < 0.002 and res.cv["all"].mape < 0.005
    assert res.in_sample["hand"].n == len(DOCS)


def test_fit_stays_in_bounds(tmp_path: Path) -> None:
    log = read_log(_synthetic(tmp_path, {"attention_scale": 0.1}))  # below the physical range
    gpu = get_gpu("h200")
    res = fit_runs([log], default_calibration(gpu), gpu, knobs=["attention_scale"], folds=2, prior=0.0)
    lo, _hi = KNOBS["attention_scale"].bounds(default_calibration(gpu).to_dict(), gpu)
    assert lo <= res.values["attention_scale"] <= lo * 1.001 and lo > 0.1


def test_cli_writes_a_calibration_replay_reads(tmp_path: Path, capsys) -> None:
    log = _synthetic(tmp_path, {"gemm_peak_tflops": 250.0, "attention_scale": 0.4})
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--runs", str(log), "-o", str(out), "--folds", "3"]) == 0
    text = capsys.readouterr().out
    assert "3-fold CV MAPE" in text and "gemm_peak_tflops" in text and "hand" in text
    assert main(["replay", str(log), "--calibration", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["mape"] < 0.02 and rep["calibration"] == "h200-fitted-to-runs"
    assert main(["replay", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mape"] > 0.1  # the shipped calibration is further off
