"""``dcpsim cost``: one sequence, one layer, one rank; the numbers are the analytic model's own."""

import json
from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost_models import (
    AnalyticCostModel,
    CostTerms,
    GroupBatch,
    JobSpec,
    ModelSpec,
    default_calibration,
    get_gpu,
    get_model,
)
from dcpsim.cost_models.flops import attention_fwd_flops
from dcpsim.experiments.cli import main

EXAMPLE = ["cost", "--gpu", "h100", "--seq-len", "32768", "--heads", "64", "--kv-heads", "4",
           "--head-dim", "128", "--cp", "1", "--json"]
KEYS = {"attention_fwd_s", "attention_bwd_s", "linear_fwd_s", "linear_bwd_s", "overhead_fwd_s",
        "overhead_bwd_s", "cp_comm_fwd_s",
        "cp_comm_bwd_s", "flops", "total_s"}


def run_json(capsys, args) -> dict:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def one_group(L, c=1, u=1):
    return GroupBatch(np.array([L]), np.array([0]), np.array([c]), np.array([u]), np.array([0]))


def test_example_matches_the_analytic_model(capsys):
    r = run_json(capsys, EXAMPLE)
    assert KEYS <= set(r)
    assert r["model"] == {"hidden": 8192, "ffn": 28672, "heads": 64, "kv_heads": 4, "head_dim": 128}
    model = ModelSpec("m", hidden=8192, ffn=28672, layers=1, heads=64, kv_heads=4, head_dim=128, vocab=128256)
    job = JobSpec(model=model, gpu=get_gpu("h100"), tp=1, pp=1, pool=1, context_len=32768)
    gc = AnalyticCostModel(job, terms=CostTerms.parse("all,-lm_head,-kernels")).group_costs(one_group(32768))
    kern = AnalyticCostModel(job,
                             terms=CostTerms.parse("all,-lm_head,-fixed_costs,-kernels")).group_costs(one_group(32768))
    assert r["attention_fwd_s"] + r["linear_fwd_s"] == pytest.approx(kern.fwd_compute_s[0], rel=1e-12)
    assert r["attention_bwd_s"] + r["linear_bwd_s"] == pytest.approx(kern.bwd_compute_s[0], rel=1e-12)
    assert r["overhead_fwd_s"] == pytest.approx(gc.fwd_compute_s[0] - kern.fwd_compute_s[0], rel=1e-9)
    assert r["cp_comm_fwd_s"] == r["cp_comm_bwd_s"] == 0.0
    assert r["total_s"] == pytest.approx(gc.total_s[0] + r["memory_kernels_fwd_s"] + r["memory_kernels_bwd_s"])
    assert r["flops"]["attention_fwd"] == pytest.approx(float(attention_fwd_flops(32768, model)))
    cal = default_calibration(get_gpu("h100"))
    assert r["calibration"] == cal.name
    fwd_curve, _, name = AnalyticCostModel(job, cal).attention_curves()
    assert r["attention_backend"] == name == "cudnn (cudnn-1.19.0)"  # TransformerEngine's pick on Hopper
    expected = float(fwd_curve.seconds(r["flops"]["attention_fwd"], 32768))
    assert r["attention_fwd_s"] == pytest.approx(expected)
    # GEMMs by shape (cost_models.gemm): dgrad + wgrad are 2x the forward's math, each with its own HBM traffic
    from dcpsim.cost_models import gemm

    lin_f, lin_b = gemm.stage_s(job, np.array([32768.0]), 0, cal.gemm.peak_tflops)
    assert (r["linear_fwd_s"], r["linear_bwd_s"]) == pytest.approx((lin_f[0] / job.stage_layers(0),
                                                                    lin_b[0] / job.stage_layers(0)))
    assert 2 * r["linear_fwd_s"] < r["linear_bwd_s"] < 2.05 * r["linear_fwd_s"]


def test_cp_splits_the_work_and_adds_communication(capsys):
    base = ["cost", "--model", "llama3-8b", "--seq-len", "131072", "--json"]
    one = run_json(capsys, base)
    ring = run_json(capsys, [*base, "--cp", "8"])
    uly = run_json(capsys, [*base, "--cp", "8", "--cp-engine", "ulysses"])
    hyb = run_json(capsys, [*base, "--cp", "8", "--cp-engine", "hybrid", "--ulysses", "4"])
    assert ring["engine"] == "ring(8)" and uly["engine"] == "ulysses(8)" and hyb["engine"] == "hybrid(4,2)"
    for r in (ring, uly, hyb):
        assert r["linear_fwd_s"] == pytest.approx(one["linear_fwd_s"] / 8, rel=0.02)
        assert r["flops"]["attention_fwd"] == pytest.approx(one["flops"]["attention_fwd"] / 8)
        assert one["attention_fwd_s"] / 8 * (1 - 1e-12) <= r["attention_fwd_s"] < one["attention_fwd_s"] / 6
    assert uly["attention_fwd_s"] == pytest.approx(one["attention_fwd_s"] / 8)  # whole sequences, a/8 heads
    assert ring["attention_fwd_s"] > uly["attention_fwd_s"]  # ring blocks of L/8 run less efficiently
    assert uly["cp_comm_fwd_s"] > 0 and hyb["cp_comm_fwd_s"] > 0


def test_tp_and_model_overrides(capsys):
    r = run_json(capsys, ["cost", "--model", "llama3-70b", "--seq-len", "16384", "--tp", "8", "--ffn", "1000",
                          "--json"])
    m = get_model("llama3-70b")
    assert r["model"] == {"hidden": m.hidden, "ffn": 1000, "heads": m.heads, "kv_heads": m.kv_heads,
                          "head_dim": m.head_dim}
    assert r["tp"] == 8
    assert r["flops"]["attention_fwd"] == pytest.approx(float(attention_fwd_flops(16384, m)) / 8)


def test_calibration_file_changes_only_its_terms(tmp_path, capsys):
    cal = default_calibration(get_gpu("h100"))
    slow = tmp_path / "slow.json"
    cudnn = cal.attention["cudnn"]  # the default backend on H100
    half_speed = replace(cudnn.fwd_causal, peak_tflops=cudnn.fwd_causal.peak_tflops / 2)
    slow.write_text(replace(cal, attention=dict(cal.attention, cudnn=replace(cudnn, fwd_causal=half_speed))).to_json())
    args = ["cost", "--model", "llama3-8b", "--seq-len", "65536", "--cp", "8", "--cp-engine", "ulysses",
            "--json"]
    a = run_json(capsys, args)
    b = run_json(capsys, [*args, "--calibration", str(slow)])
    assert b["attention_fwd_s"] == pytest.approx(2 * a["attention_fwd_s"])
    for k in ("attention_bwd_s", "linear_fwd_s", "linear_bwd_s", "cp_comm_fwd_s", "cp_comm_bwd_s"):
        assert a[k] == b[k], k


def test_table_output(capsys):
    assert main(EXAMPLE[:-1]) == 0
    out = capsys.readouterr().out
    for needle in ("attention", "linear", "CP comm (exposed)", "total", "fwd ms", "TFLOP/s", "heads 64/4 KV"):
        assert needle in out


@pytest.mark.parametrize("args, needle", [
    (["--seq-len", "1000"], "give a model"),
    (["--model", "llama3-8b", "--seq-len", "1000", "--cp", "8", "--cp-engine", "hybrid"], "needs --ulysses"),
    (["--model", "llama3-8b", "--seq-len", "1000", "--cp", "8", "--cp-engine", "hybrid", "--ulysses", "16"],
     "Ulysses degree of 16 is invalid"),
    (["--model", "llama3-8b", "--seq-len", "1000", "--cp", "16", "--cp-engine", "ulysses"],
     "Ulysses degree of 16"),
    (["--model", "llama3-8b", "--seq-len", "1000", "--ulysses", "2"], "--ulysses is for --cp-engine hybrid"),
    (["--model", "gpt5", "--seq-len", "1000"], "unknown model preset 'gpt5'"),
    (["--heads", "6", "--kv-heads", "4", "--seq-len", "1000"], "kv_heads"),
    (["--model", "llama3-8b", "--seq-len", "1000", "--calibration", "/nonexistent.json"],
     "/nonexistent.json: file not found; expected an existing calibration file"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, needle):
    assert main(["cost", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_layer_overhead_is_its_own_term(tmp_path, capsys):
    cal = default_calibration(get_gpu("h100"))
    path = tmp_path / "overhead.json"
    path.write_text(replace(cal, layer_overhead_fwd_s=2e-4, layer_overhead_bwd_s=5e-4).to_json())
    args = ["cost", "--model", "llama3-8b", "--seq-len", "4096", "--json"]
    a = run_json(capsys, args)
    b = run_json(capsys, [*args, "--calibration", str(path)])
    # CP 1: one layer, no ring step, one microbatch
    assert a["overhead_fwd_s"] == pytest.approx(cal.layer_overhead_fwd_s + cal.microbatch_overhead_fwd_s)
    assert a["overhead_bwd_s"] == pytest.approx(cal.layer_overhead_bwd_s + cal.microbatch_overhead_bwd_s)
    assert b["overhead_fwd_s"] == pytest.approx(2e-4 + cal.microbatch_overhead_fwd_s)
    assert b["overhead_bwd_s"] == pytest.approx(5e-4 + cal.microbatch_overhead_bwd_s)
    for k in ("attention_fwd_s", "attention_bwd_s", "linear_fwd_s", "linear_bwd_s"):
        assert a[k] == b[k], k
    assert b["total_s"] == pytest.approx(a["total_s"] + 7e-4 - cal.layer_overhead_fwd_s - cal.layer_overhead_bwd_s)
    assert main(["cost", "--model", "llama3-8b", "--seq-len", "4096", "--calibration", str(path)]) == 0
    assert "fixed costs" in capsys.readouterr().out


def test_ring_steps_pay_their_fixed_cost(capsys):
    """A ring of 8 has 7 steps beyond the local one: 7 · ring_step_overhead on top of the layer's."""
    cal = default_calibration(get_gpu("h100"))
    r = run_json(capsys, ["cost", "--model", "llama3-8b", "--seq-len", "65536", "--cp", "8", "--json"])
    assert r["overhead_fwd_s"] == pytest.approx(cal.layer_overhead_fwd_s + 7 * cal.ring_step_overhead_fwd_s
                                                + cal.microbatch_overhead_fwd_s, rel=1e-12)
    assert r["overhead_bwd_s"] == pytest.approx(cal.layer_overhead_bwd_s + 7 * cal.ring_step_overhead_bwd_s
                                                + cal.microbatch_overhead_bwd_s, rel=1e-12)


def test_attention_backends_are_priced_by_their_own_curves(capsys):
    """FA2 < FA3 < cuDNN at 32K on H200 (published throughput ~346, ~644, ~694 TFLOP/s causal forward);
    the term off prices the calibration's single (FA3) curve; a backend without curves is one clear error."""
    base = ["cost", "--model", "llama3-8b", "--gpu", "h200", "--seq-len", "32768", "--json"]
    t = {b: run_json(capsys, [*base, "--attention-backend", b])["attention_fwd_s"] for b in ("fa2", "fa3", "cudnn")}
    assert t["fa2"] > t["fa3"] > t["cudnn"]
    assert t["fa2"] / t["cudnn"] == pytest.approx(2.0, rel=0.1)  # "up to 2x" between backends
    assert run_json(capsys, base)["attention_fwd_s"] == t["cudnn"]
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), attention_backend="fa2")
    from dcpsim.cost_models.calibration import published_calibration
    from dcpsim.cost_models.errors import CalibrationError
    with pytest.raises(CalibrationError, match="no curves for attention_backend = 'fa2'"):
        AnalyticCostModel(job, published_calibration(job.gpu)).group_costs(one_group(4096))
    off = AnalyticCostModel(job, terms=CostTerms.parse("all,-attention_backend"))
    assert off.attention_curves()[0] == default_calibration(job.gpu).attn_fwd


def test_memory_lists_each_stages_layers_under_megatrons_split(capsys):
    """``--memory`` with Megatron's spelling of the uneven split: Llama 3.1 405B at PP 8 × VP 8 with the embedding
    and the loss counted (dgxc D6) lists 15 = 1+2+…, 16 = 2+…, 15 = …+1 layers; a layout Megatron refuses is one
    line naming the field."""
    args = ["cost", "--model", "llama3.1-405b", "--tp", "8", "--pp", "8", "--vpp", "8", "--cp", "2", "--pool", "8",
            "--seq-len", "8192", "--memory", "--no-grad-reduce-in-fp32"]
    flags = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    parts = run_json(capsys, args + flags + ["--json"])
    assert [p["layers"] for p in parts] == [15] + [16] * 6 + [15]
    assert parts[0]["chunk_layers"] == [1] + [2] * 7 and parts[7]["chunk_layers"] == [2] * 7 + [1]
    assert max(p["total_gb"] for p in parts) < 80
    assert main(args + flags) == 0
    table = capsys.readouterr().out
    assert "15 = 1+2+2+2+2+2+2+2" in table and "15 = 2+2+2+2+2+2+2+1" in table
    assert main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "dcpsim cost: error: job.pp = 8 is invalid: must divide model.layers = 126"]


def test_split_flags_reach_the_job_from_the_cli_and_scenario():
    from dcpsim.experiments.cli.args import scenario_from_args
    from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO

    ns = type("A", (), {"model": "llama3.1-405b", "tp": 8, "pp": 8, "vpp": 8, "pool": 8,
                        "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True})()
    sc = scenario_from_args(ns)
    assert sc.job().split[0] == (1,) + (2,) * 7 and sc.job().split[7] == (2,) * 7 + (1,)
    assert sc.to_dict()["account_for_embedding_in_pipeline_split"] is True
    assert "account_for_embedding_in_pipeline_split" not in DEFAULT_SCENARIO.to_dict()
    ns2 = type("A", (), {"pp": 4, "num_layers_in_first_pipeline_stage": 2})()
    assert scenario_from_args(ns2).job().split == ((2,), (10,), (10,), (10,))
