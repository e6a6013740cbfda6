"""The profiler writes valid profile-table rows (read back with cost_models.profile_table) that the fitter
accepts: compute rows in this process, collectives on 2 gloo processes (one spawn)."""

import pytest

torch = pytest.importorskip("torch")

from dcpsim.cost_models import get_gpu, get_model
from dcpsim.cost_models.calibration import published_calibration
from dcpsim.cost_models.fitting import fit_calibration
from dcpsim.cost_models.profile_table import COLUMNS, COMPUTE_OPS, read_profile
from dcpsim.real_runtime.profile import main as profile_main
from dcpsim.real_runtime.profile import profile_job, run_profile
from dcpsim.real_runtime.profiler import ProfileSettings, linear_shapes, profile_compute, write_rows

TINY = ProfileSettings(attention_lengths=(32, 96, 256), gemm_tokens=(16, 64, 256), layer_tokens=(16, 64),
                       collective_bytes=(1 << 12, 1 << 16), repeats=2, warmup=1, window_s=0.005)


@pytest.fixture(scope="module")
def compute_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("prof") / "compute.csv"
    write_rows(profile_compute(get_model("tiny"), torch.device("cpu"), torch.float32, TINY, "math", "test"),
               str(path))
    return path


def test_compute_rows_are_valid_profile_rows(compute_csv):
    df = read_profile(compute_csv)
    assert list(df.columns) == list(COLUMNS)
    assert (df.seconds > 0).all() and (df.device == "cpu").all()
    att = df[df.op.isin(["attn_fwd", "attn_bwd"])]
    assert sorted(set(att.q_len)) == [32, 96, 256] and (att.causal == 1).all() and (att.kernel == "math").all()
    m = get_model("tiny")
    assert set(att.heads) == {m.heads} and set(att.kv_heads) == {m.kv_heads} and set(att.head_dim) == {m.head_dim}
    gemm = df[df.op == "gemm"]
    assert sorted({(int(a), int(b)) for a, b in zip(gemm.in_features, gemm.out_features)}) == \
        sorted(linear_shapes(m))
    assert len(gemm) == len(linear_shapes(m)) * 3
    layer = df[df.op.isin(["layer_fwd", "layer_bwd"])]
    assert sorted(layer.op) == ["layer_bwd"] * 2 + ["layer_fwd"] * 2 and sorted(set(layer.tokens)) == [16, 64]
    assert set(layer.in_features) == {m.hidden} and set(layer.out_features) == {m.ffn}
    assert set(layer.heads) == {m.heads} and set(layer.kv_heads) == {m.kv_heads}
    assert (layer.q_len == layer.tokens).all() and (layer.kernel == "math").all()


def test_fitter_accepts_the_profile(compute_csv):
    cal, report = fit_calibration(read_profile(compute_csv), published_calibration(get_gpu("h200")), "cpu-test")
    assert {t.key: t.how for t in report.terms}["attn_fwd"] == "fitted"
    assert {t.key: t.how for t in report.terms}["gemm"] == "fitted"
    assert cal.attn_fwd.peak_tflops > 0 and cal.gemm.peak_tflops > 0
    assert report.term("layer_overhead_fwd_s").how == "fitted" and report.term("layer_overhead_bwd_s").rows == 2
    # the calibration carries what the fit reports (the constructor already refuses negative overheads)
    assert cal.layer_overhead_fwd_s == report.term("layer_overhead_fwd_s").params["seconds"]
    assert cal.layer_overhead_bwd_s == report.term("layer_overhead_bwd_s").params["seconds"]


@pytest.mark.parametrize("layout", ["concurrent", "alone"])
def test_two_processes_in_either_layout(tmp_path, layout):
    out = tmp_path / "coll.csv"
    job = profile_job(str(out), quick=True, layout=layout)
    job["settings"] = dict(TINY.to_dict(), layout=layout)
    run_profile(job, nproc=2, timeout_s=120)
    df = read_profile(out)
    coll = df[~df.op.isin(COMPUTE_OPS)]
    assert set(coll.op) == {"send_recv", "all_to_all", "all_gather", "reduce_scatter", "all_reduce"}
    assert (coll.group_size == 2).all() and (coll.link == "nvlink").all() and (coll.seconds > 0).all()
    assert set(coll.bytes) == {1 << 12, 1 << 16}
    ring = df[df.op.isin(["ring_fwd", "ring_bwd"])]  # one layer's ring attention, for the per-step cost
    assert len(ring) == 2 * len(TINY.layer_tokens) and (ring.group_size == 2).all() and (ring.seconds > 0).all()
    assert set(ring.tokens) == set(TINY.layer_tokens) and (ring.link == "nvlink").all()
    compute = df[df.op.isin(COMPUTE_OPS) & ~df.op.isin(["ring_fwd", "ring_bwd"])]
    assert len(compute) == len(linear_shapes(get_model("tiny"))) * 3 + 3 * 2 + 2 * 2 and (compute.seconds > 0).all()
    cal, report = fit_calibration(ring, published_calibration(get_gpu("h100")), "two-process")
    assert report.term("ring_step_overhead_fwd_s").how == "fitted" and cal.ring_step_overhead_fwd_s >= 0
    expect = ("compute timed concurrently on 2 processes, mean of >= 5 ms of calls, averaged over processes"
              if layout == "concurrent" else "compute timed on 1 process alone, mean of >= 5 ms of calls")
    assert set(df.source) == {f"real_runtime.profiler (gloo, float32, 2 process(es); {expect})"}


def test_command_line_layout_option(tmp_path):
    with pytest.raises(SystemExit):
        profile_main(["--out", str(tmp_path / "x.csv"), "--layout", "sideways"])
    from dcpsim.real_runtime.profile import build_parser

    assert build_parser().parse_args(["--out", "x.csv"]).layout == "concurrent"


def test_command_line_errors_are_one_line(capsys):
    assert profile_main(["--out", "x.csv", "--nproc", "2", "--backend", "nccl"]) == 2
    assert "nccl" in capsys.readouterr().err


def test_old_settings_without_layer_tokens_still_load():
    d = TINY.to_dict()
    del d["layer_tokens"]
    assert ProfileSettings.from_dict(d).layer_tokens == ProfileSettings().layer_tokens
