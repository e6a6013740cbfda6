"""``dcpsim calibrate``: fits and writes a calibration JSON, reports errors and plots; bad input is one line
and exit 2; a calibration equal to the default leaves ``dcpsim compare --json`` unchanged."""

import json
from pathlib import Path

import pytest

from dcpsim.cost_models import Calibration, default_calibration, get_gpu
from dcpsim.cost_models.data import build_defaults
from dcpsim.experiments.cli import main

DATA = Path(build_defaults.__file__).parent
PROFILE = str(DATA / "profile_h100.csv")
HEADER = ("op,kernel,q_len,kv_len,batch,heads,kv_heads,head_dim,causal,tokens,in_features,out_features,bytes,"
          "group_size,link,device,seconds,source")


def test_regenerates_the_shipped_h100_calibration_byte_for_byte(tmp_path, capsys):
    out = tmp_path / "h100.json"
    rc = main(["calibrate", PROFILE, "--gpu", "h100", "--base", "published", "--name", "h100-reference-fit",
               "-o", str(out)])
    assert rc == 0
    assert out.read_text() == (DATA / "calibration_h100.json").read_text()
    line = capsys.readouterr().out
    assert "wrote" in line and "attn_fwd, attn_bwd" in line and "all_gather:nvlink" in line


def test_the_library_function_fits_writes_and_returns_what_the_command_prints(tmp_path):
    from dcpsim.experiments.calibration.fit import calibrate_profiles

    fit = calibrate_profiles([PROFILE], tmp_path / "h100.json", gpu="h100", base="published",
                             name="h100-reference-fit")
    written = fit.path.read_text()
    assert written == (DATA / "calibration_h100.json").read_text() == fit.calibration.to_json() + "\n"
    assert fit.base.name != fit.calibration.name and len(fit.profile) > 0
    fitted = {t.key for t in fit.report.terms if t.how != "base"}
    assert {"attn_fwd", "attn_bwd", "all_gather:nvlink"} <= fitted


def test_report_prints_parameters_mape_and_loo_and_writes_the_default_plot(tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", PROFILE, "-o", str(out), "--report"]) == 0
    text = capsys.readouterr().out
    for needle in ("attn_fwd", "attn_bwd", "derived", "peak 655.4 TFLOP/s", "all_gather:nvlink", "busbw",
                   "MAPE", "leave-one-out", "fa3", "cudnn9.1", "send_recv:nvlink"):
        assert needle in text, needle
    png = tmp_path / "cal_fit.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in text
    cal = Calibration.load(out)
    assert cal.name == "h100-calibrated"
    assert cal.comm == default_calibration(get_gpu("h100")).comm  # base = shipped, same NCCL rows


def test_plot_path_and_filters(tmp_path, capsys):
    plot = tmp_path / "fit.png"
    out = tmp_path / "c.json"
    assert main(["calibrate", PROFILE, "-o", str(out), "--plot", str(plot), "--kernel", "cudnn9.1",
                 "--device", "h100", "--gpu", "h200", "--name", "mine"]) == 0
    assert plot.exists()
    cal = Calibration.load(out)
    assert cal.name == "mine" and cal.attn_fwd.peak_tflops < 600  # cuDNN's curve, not FA3's
    assert cal.attn_bwd == default_calibration(get_gpu("h200")).attn_bwd  # no cuDNN backward: base kept


def test_a_users_attention_only_profile_keeps_the_shipped_links(tmp_path, capsys):
    prof = tmp_path / "mine.csv"
    def seconds(L: int) -> float:  # 300 TFLOP/s peak, half 800 tokens
        return 2 * L * L * 128 * 32 / (300e12 * L / (L + 800))

    rows = [f"attn_fwd,my-kernel,{L},{L},1,32,8,128,1,,,,,,,h100,{seconds(L):.6g},my profiler"
            for L in (1024, 2048, 4096, 8192, 16384, 32768)]
    prof.write_text("\n".join([HEADER, *rows]) + "\n")
    out = tmp_path / "mine.json"
    assert main(["calibrate", str(prof), "-o", str(out)]) == 0
    cal, shipped = Calibration.load(out), default_calibration(get_gpu("h100"))
    assert (cal.attn_fwd.peak_tflops, cal.attn_fwd.half) == pytest.approx((300, 800), rel=1e-3)
    assert (cal.attn_bwd, cal.gemm, cal.comm) == (shipped.attn_bwd, shipped.gemm, shipped.comm)


@pytest.mark.parametrize("row, needle", [
    ("attn_fwd,fa3,4096,4096,4,16,16,128,1,,,,,,,h100,-0.5,x", "row 1: seconds = '-0.5'"),
    ("attn_fwx,fa3,4096,4096,4,16,16,128,1,,,,,,,h100,0.5,x", "row 1: op = 'attn_fwx'"),
    ("all_gather,,,,,,,,,,,,8388608,2,pcie,h100,1e-5,x", "row 1: link = 'pcie'"),
])
def test_bad_profile_exits_2_with_one_line(tmp_path, capsys, row, needle):
    prof = tmp_path / "bad.csv"
    prof.write_text(HEADER + "\n" + row + "\n")
    assert main(["calibrate", str(prof), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dcpsim calibrate: error:")
    assert str(prof) in err and needle in err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--device", "b200"], "no profile rows of device 'b200'"),
    (["--kernel", "fa9"], "no attention rows of kernel 'fa9'"),
    (["--gpu", "v100"], "unknown GPU preset 'v100'"),
    (["--base", "/nonexistent/base.json"], "cannot read calibration file"),
])
def test_bad_options_exit_2_with_one_line(tmp_path, capsys, extra, needle):
    assert main(["calibrate", PROFILE, "-o", str(tmp_path / "x.json"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_missing_profile_and_unwritable_output(tmp_path, capsys):
    assert main(["calibrate", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "x.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["calibrate", PROFILE, "-o", str(tmp_path / "no" / "dir" / "x.json")]) == 2
    assert "no/dir does not exist" in capsys.readouterr().err  # checked before the fit


def _compare(extra: list[str], trace: Path, capsys) -> dict:
    args = ["compare", "--model", "llama3-8b", "--gpu", "h100", "--pp", "1", "--pool", "8",
            "--context-len", "32768", "--global-batch-tokens", "131072", "--max-seqlen-per-rank", "16384",
            "--trace", str(trace),
            "--policies", "static-cp,mcore-dcp", "--json", "--no-progress", *extra]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_with_a_calibration_equal_to_the_default_is_identical(tmp_path, capsys, monkeypatch):
    from dcpsim.experiments.cli import compare as cmd_compare

    # the progress bar is off (--no-progress); keep it from touching a stderr captured by an earlier test
    monkeypatch.setattr(cmd_compare, "Progress", lambda *a, **k: None)
    trace = tmp_path / "lengths.csv"
    trace.write_text("length\n" + "\n".join(map(str, [32768, 16000, 8000, 4000, 4000, 2000, 1000, 500, 30000,
                                                      12000, 9000, 3000])) + "\n")
    same = tmp_path / "same.json"
    same.write_text(default_calibration(get_gpu("h100")).to_json())
    a = _compare([], trace, capsys)
    b = _compare(["--calibration", str(same)], trace, capsys)
    assert json.dumps(a["results"], sort_keys=True) == json.dumps(b["results"], sort_keys=True)
    assert a["scenario"] == dict(b["scenario"], calibration=None)  # only the recorded file name differs
    slow = tmp_path / "slow.json"
    d = json.loads(same.read_text())
    d["attn_fwd"]["peak_tflops"] /= 2
    d["attention"]["cudnn"]["fwd_causal"]["peak_tflops"] /= 2  # the backend the default run prices
    slow.write_text(json.dumps(d))
    c = _compare(["--calibration", str(slow)], trace, capsys)
    assert c["results"][0]["iteration_time_s"] > a["results"][0]["iteration_time_s"]


def _rows(pattern: str) -> str:
    return "\n".join([HEADER, *(r for r in Path(PROFILE).read_text().splitlines() if r.startswith(pattern)
                                and ",128,1," in r)]) + "\n"


def test_a_backend_its_rows_cannot_fit_is_reported_as_the_base_it_wrote(tmp_path, capsys):
    """FA3 causal forwards alone fix attn_fwd but not the fa3 backend's four curves: the report and the
    summary line say the backend is the base's, which is what the file holds."""
    prof = tmp_path / "fa3_fwd.csv"
    prof.write_text(_rows("attn_fwd,fa3,"))
    out = tmp_path / "c.json"
    assert main(["calibrate", str(prof), "-o", str(out), "--report", "--plot", str(tmp_path / "p.png")]) == 0
    text = capsys.readouterr().out
    assert "fitted attn_fwd;" in text.splitlines()[0]
    fa3 = next(line for line in text.splitlines() if line.startswith("attention:fa3"))
    assert " base " in fa3 and "do not give all four curves" in fa3
    written = Calibration.load(out).attention["fa3"]
    assert written == default_calibration(get_gpu("h100")).attention["fa3"]


def test_one_row_fixes_no_half_saturation_and_says_so(tmp_path, capsys):
    prof = tmp_path / "one.csv"
    prof.write_text("\n".join(_rows("attn_fwd,fa3,").splitlines()[:2]) + "\n")
    assert main(["calibrate", str(prof), "-o", str(tmp_path / "c.json")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: attn_fwd: 1 profile row(s) at one size")
    assert "half-saturation size is set to 0" in err[0]
    assert Calibration.load(tmp_path / "c.json").attn_fwd.half == 0.0
