"""TP (sequence-parallel) communication: 2 all-gathers + 2 reduce-scatters of tokens·h·2 bytes per layer and
pass, on the TP group's NVLink, gated by CostTerms.tp_comm (cost_models.analytic.tp_comm_layer_s)."""

import json

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, GroupBatch, JobSpec, get_gpu, get_model
from dcpsim.cost_models.errors import SpecError
from dcpsim.experiments.cli import main

LAYERS = CostTerms.parse("all,-lm_head")  # pp = 1: the only stage is also the last; price the layers alone


def one_group(L, c=1):
    return GroupBatch(np.array([L]), np.array([0]), np.array([c]), np.array([1]), np.array([0]))


def job70(tp=8, **kw):
    return JobSpec(model=get_model("llama3-70b"), gpu=get_gpu("h100"), tp=tp, pp=1, pool=1, context_len=8192,
                   **kw)


def test_hand_calculation_llama3_70b_tp8_8k():
    """Hand calculation, h = 8192, t = 8, 8,192 tokens on the rank:
    buffer = 8192 · 8192 · 2 B = 134,217,728 B; a ring moves 7/8 of it per GPU = 117,440,512 B.
    With the shipped H100 NVLink fits (all_gather: base 21.42 µs, hop 4.02 µs, 365.3 GB/s;
    reduce_scatter: base 37.37 µs, hop 0.94 µs, 321.9 GB/s):
      all-gather     = 21.42 + 7 · 4.02 + 117.44e6 / 365.3e9 s = 21.4 + 28.2 + 321.5 µs ≈ 371 µs
      reduce-scatter = 37.37 + 7 · 0.94 + 117.44e6 / 321.9e9 s = 37.4 +  6.6 + 364.9 µs ≈ 409 µs
      per layer forward = 2 · (371 + 409) µs ≈ 1.56 ms (the audit's 1.3–1.6 ms); backward the same."""
    model = AnalyticCostModel(job70(), terms=LAYERS)
    ag, rs = model.cal.link("all_gather", "nvlink"), model.cal.link("reduce_scatter", "nvlink")
    moved = 8192 * 8192 * 2 * 7 / 8
    hand = 2 * (ag.base_s + 7 * ag.hop_s + moved / (ag.busbw_gbs * 1e9)
                + rs.base_s + 7 * rs.hop_s + moved / (rs.busbw_gbs * 1e9))
    gc = model.group_costs(one_group(8192))  # a stage: all 80 layers
    nl = 80
    assert gc.fwd_tp_comm_s[0] == pytest.approx(nl * hand, rel=1e-12)
    assert gc.bwd_tp_comm_s[0] == pytest.approx(nl * hand, rel=1e-12)
    assert hand == pytest.approx(1.56e-3, rel=0.01)
    assert gc.total_s[0] == pytest.approx(gc.fwd_compute_s[0] + gc.bwd_compute_s[0] + 2 * nl * hand, rel=1e-12)


def test_cli_reports_tp_comm_in_the_accepted_range(capsys):
    assert main(["cost", "--model", "llama3-70b", "--tp", "8", "--seq-len", "8192", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert 0.5e-3 <= r["tp_comm_fwd_s"] <= 3e-3
    assert r["tp_comm_bwd_s"] == r["tp_comm_fwd_s"]
    assert r["total_s"] == pytest.approx(r["attention_fwd_s"] + r["attention_bwd_s"] + r["linear_fwd_s"]
                                         + r["linear_bwd_s"] + r["overhead_fwd_s"] + r["overhead_bwd_s"]
                                         + r["cp_comm_fwd_s"] + r["cp_comm_bwd_s"] + r["tp_comm_fwd_s"]
                                         + r["tp_comm_bwd_s"] + r["memory_kernels_fwd_s"]
                                         + r["memory_kernels_bwd_s"], rel=1e-12)
    assert main(["cost", "--model", "llama3-70b", "--tp", "8", "--seq-len", "8192", "--json",
                 "--tp-comm-overlap", "0.75"]) == 0
    q = json.loads(capsys.readouterr().out)
    assert q["tp_comm_fwd_s"] == pytest.approx(0.25 * r["tp_comm_fwd_s"], rel=1e-12)


def test_no_tp_comm_without_tp_or_with_the_term_off():
    assert AnalyticCostModel(job70(tp=1)).group_costs(one_group(8192)).fwd_tp_comm_s[0] == 0.0
    off = AnalyticCostModel(job70(), terms=CostTerms.parse("all,-tp_comm")).group_costs(one_group(8192))
    assert off.fwd_tp_comm_s[0] == off.bwd_tp_comm_s[0] == 0.0


def test_cp_shares_the_tokens_of_tp_comm():
    """With CP c each rank all-gathers its own L/c tokens: the bandwidth part scales by 1/c."""
    model = AnalyticCostModel(job70().with_(pool=2), terms=LAYERS)
    ag, rs = model.cal.link("all_gather", "nvlink"), model.cal.link("reduce_scatter", "nvlink")
    alpha = 2 * (ag.base_s + 7 * ag.hop_s + rs.base_s + 7 * rs.hop_s)
    one, two = (float(model.group_costs(one_group(16384, c)).fwd_tp_comm_s[0]) / 80 for c in (1, 2))
    assert two - alpha == pytest.approx((one - alpha) / 2, rel=1e-12)


def test_overlap_out_of_range_is_one_clear_error():
    with pytest.raises(SpecError, match="tp_comm_overlap = 1.5 is invalid"):
        job70(tp_comm_overlap=1.5)


def test_simulation_reports_tp_comm_per_rank():
    from dcpsim.policies.plan import CPGroup, Engine, Microbatch, Plan
    from dcpsim.sim.simulate import simulate_plan
    from dcpsim.traces import GlobalBatch

    job = job70().with_(max_tokens_per_rank=8192)
    cm = AnalyticCostModel(job, terms=LAYERS)
    batch = GlobalBatch(np.array([0]), np.array([8192]), 0)
    plan = Plan("test", 1, (Microbatch((CPGroup((0,), (0,), Engine("ring", 1, 1)),)),))
    res = simulate_plan(plan, batch, cm)
    per_stage = float(cm.group_costs(one_group(8192)).fwd_tp_comm_s[0])
    assert res.metrics.tp_comm_s == pytest.approx(2 * per_stage, rel=1e-9)
    assert res.metrics.pipeline_bubble == pytest.approx(0.0, abs=1e-9)
