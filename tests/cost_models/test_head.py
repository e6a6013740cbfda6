"""Embedding (first stage), LM head and loss (last stage): compute in the per-stage costs, logits in memory;
gated by CostTerms.lm_head (cost_models.head)."""

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, GroupBatch, JobSpec, get_gpu, get_model
from dcpsim.cost_models.memory import memory_budget_tokens


def groups(L, n=1):
    return GroupBatch(np.full(n, L), np.arange(n), np.ones(n, np.int64), np.ones(n, np.int64),
                      np.zeros(n, np.int64))


def two_stage(**kw):
    return JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=2, pool=1, context_len=8192,
                   max_tokens_per_rank=8192, **kw)


HEAD_ONLY = CostTerms.parse("legacy,+lm_head")


def test_last_stage_exceeds_first_by_head_and_loss_minus_embedding_closed_form():
    """llama3-8b (h = 4096, V = 128,256) on H200 (HBM 4.8 TB/s), L = 8,192 tokens, PP 2, TP 1; the stages
    hold 16 layers each, so their layer costs are equal and the difference is the ends alone:
      LM head fwd  = 2·h·V·L FLOPs = 8.607e12 FLOPs on the GEMM curve (peak P, half x½ of the calibration):
                     8.607e12 · (L + x½) / (P·1e12 · L) s;  backward 2x
      loss         = L·V logits · (38 B fwd, 14 B bwd) / 4.8e12 B/s = 8.318 ms fwd, 3.064 ms bwd
      embedding    = L·h · (4 B fwd, 6 B bwd) / 4.8e12 B/s = 27.96 µs fwd, 41.94 µs bwd
    last − first (per microbatch, fwd + bwd) = 3·head GEMM + 11.38 ms − 69.9 µs."""
    job = two_stage()
    cm = AnalyticCostModel(job, terms=HEAD_ONLY)
    L, h, V, B = 8192, 4096, 128256, 4.8e12
    P, half = cm.cal.gemm.peak_tflops, cm.cal.gemm.half
    head_f = 2 * h * V * L * (L + half) / (P * 1e12 * L)
    loss_f, loss_b = L * V * 38 / B, L * V * 14 / B
    emb_f, emb_b = L * h * 4 / B, L * h * 6 / B
    assert loss_f == pytest.approx(8.318e-3, rel=1e-3) and emb_f == pytest.approx(27.96e-6, rel=1e-3)
    first, last = cm.group_costs(groups(L), 0), cm.group_costs(groups(L), 1)
    assert last.fwd_compute_s[0] - first.fwd_compute_s[0] == pytest.approx(head_f + loss_f - emb_f, rel=1e-9)
    assert last.bwd_compute_s[0] - first.bwd_compute_s[0] == pytest.approx(2 * head_f + loss_b - emb_b, rel=1e-9)
    assert last.total_s[0] - first.total_s[0] == pytest.approx(3 * head_f + loss_f + loss_b - emb_f - emb_b,
                                                               rel=1e-9)
    # with the term off both stages cost the same
    legacy = AnalyticCostModel(job, terms=CostTerms.legacy())
    assert legacy.group_costs(groups(L), 1).total_s[0] == legacy.group_costs(groups(L), 0).total_s[0]


def test_the_simulator_prices_each_stage_with_its_own_ends():
    from dcpsim.policies.plan import CPGroup, Engine, Microbatch, Plan
    from dcpsim.sim.simulate import simulate_plan
    from dcpsim.traces import GlobalBatch

    job = two_stage()
    cm = AnalyticCostModel(job, terms=HEAD_ONLY)
    plan = Plan("test", 1, (Microbatch((CPGroup((0,), (0,), Engine("ring", 1, 1)),)),))
    res = simulate_plan(plan, GlobalBatch(np.array([0]), np.array([8192]), 0), cm)
    tl = res.timeline
    comp = (tl["kind"] == "compute") & (tl["microbatch"] >= 0)
    dur = {(int(s), str(ph)): float(d) for s, ph, d in zip(tl["stage"][comp], tl["phase"][comp], tl.duration[comp])}
    for s in (0, 1):
        c = cm.group_costs(groups(8192), s)
        assert dur[(s, "F")] == pytest.approx(c.fwd_compute_s[0], rel=1e-12)
        assert dur[(s, "B")] == pytest.approx(c.bwd_compute_s[0], rel=1e-12)
    assert dur[(1, "F")] > dur[(0, "F")]


def test_tp_splits_the_head_and_adds_its_collectives():
    job = two_stage().with_(tp=2)
    cm = AnalyticCostModel(job, terms=CostTerms.parse("legacy,+lm_head,+tp_comm"))
    off = AnalyticCostModel(job, terms=CostTerms.parse("legacy,+tp_comm"))
    last, base = cm.group_costs(groups(8192), 1), off.group_costs(groups(8192), 1)
    ag = cm.cal.link("all_gather", "nvlink").seconds("all_gather", 8192 * 4096 * 2, 2)
    rs = cm.cal.link("reduce_scatter", "nvlink").seconds("reduce_scatter", 8192 * 4096 * 2, 2)
    ar = cm.cal.link("all_reduce", "nvlink").seconds("all_reduce", 8192 * 4, 2)
    assert last.fwd_tp_comm_s[0] - base.fwd_tp_comm_s[0] == pytest.approx(ag + 3 * ar, rel=1e-12)
    assert last.bwd_tp_comm_s[0] - base.bwd_tp_comm_s[0] == pytest.approx(rs, rel=1e-12)


def test_logits_enter_the_budget_and_the_peak_of_the_last_stage_once():
    job = two_stage().with_(max_tokens_per_rank=None, pool=8)
    V = 128256
    on, off = AnalyticCostModel(job, terms=HEAD_ONLY), AnalyticCostModel(job, terms=CostTerms.legacy())
    tok = np.array([30000.0])
    d_last = on.peak_memory_gb(tok, 1, largest_tokens=np.array([10000.0])) - off.peak_memory_gb(tok, 1)
    assert d_last[0] == pytest.approx(10000 * V * 4 / 1e9, rel=1e-12)
    assert on.peak_memory_gb(tok, 0)[0] == off.peak_memory_gb(tok, 0)[0]
    # PP 2: stage 0 holds two microbatches' activations and binds the budget; PP 1: the logits bind
    assert memory_budget_tokens(job, HEAD_ONLY) == memory_budget_tokens(job, CostTerms.legacy())
    one = job.with_(pp=1)
    free = 141e9 - 6e9 - AnalyticCostModel(one, terms=HEAD_ONLY).model_state_gb(0) * 1e9
    act = 34 * 4096 * 32
    assert memory_budget_tokens(one, CostTerms.legacy()) == int(free // act)
    assert memory_budget_tokens(one, HEAD_ONLY) == int(free // (act + V * 4))
