"""MoE terms of the analytic cost model (cost_models.moe), checked against hand calculations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost_models import (
    AnalyticCostModel,
    CostTerms,
    GroupBatch,
    JobSpec,
    ModelSpec,
    SpecError,
    get_gpu,
    moe,
)
from dcpsim.cost_models.calibration import published_calibration
from dcpsim.cost_models.memory import activation_bytes_per_token, model_state_bytes

H, F_E, E, K, LAYERS = 1024, 512, 16, 2, 4
MODEL = ModelSpec(
    "moe-test",
    hidden=H,
    ffn=2048,
    layers=LAYERS,
    heads=8,
    kv_heads=2,
    head_dim=128,
    vocab=1000,
    experts=E,
    experts_per_token=K,
    expert_ffn=F_E,
)
ATTN = 2 * H * 1024 + 2 * H * 256  # Q, O: h × a·d; K, V: h × g·d
EXPERT = 3 * H * F_E
ROUTER = H * E


def job(ep=1, pool=16, recompute=True, tp=1) -> JobSpec:
    return JobSpec(
        MODEL,
        get_gpu("h100"),
        tp=tp,
        pp=1,
        pool=pool,
        ep=ep,
        context_len=65536,
        max_tokens_per_rank=65536,
        moe_recompute=recompute,
    )


def one_group(L: int) -> GroupBatch:
    return GroupBatch(np.array([L]), np.array([0]), np.array([1]), np.array([1]), np.array([0]))


def test_linear_forward_is_projections_router_and_k_experts_at_their_rows():
    j = job(ep=4)
    cal = published_calibration(j.gpu)
    T = 4096.0
    rows = 4 * T * K / E  # ep · T · k / E tokens reach each expert
    hand = LAYERS * (
        cal.gemm.seconds(2 * ATTN * T, T)
        + cal.gemm.seconds(2 * ROUTER * T, T)
        + cal.gemm.seconds(2 * K * EXPERT * T, rows)
    )
    assert moe.linear_fwd_s(j, cal, np.array([T]), 0)[0] == pytest.approx(hand, rel=1e-12)
    # On a flat GEMM curve the time is just 2 × active weights × tokens / peak.
    flat = replace(cal, gemm=replace(cal.gemm, half=1e-9))
    active = ATTN + ROUTER + K * EXPERT
    assert moe.linear_fwd_s(j, flat, np.array([T]), 0)[0] == pytest.approx(
        LAYERS * 2 * active * T / (flat.gemm.peak_tflops * 1e12), rel=1e-9
    )


def test_more_expert_parallelism_feeds_each_expert_more_rows():
    cal = published_calibration(get_gpu("h100"))
    t = [moe.linear_fwd_s(job(ep=ep), cal, np.array([1024.0]), 0)[0] for ep in (1, 4, 16)]
    assert t[0] > t[1] > t[2]  # 128, 512, 2048 rows per expert: the grouped GEMM runs closer to peak


def test_ep_all_to_all_inside_a_node_and_across_nodes_by_hand():
    T = 8192
    nbytes = T * K * H * 2.0  # T·k tokens of h bf16 values per GPU, dispatch and again combine
    for ep, link in ((8, "nvlink"), (16, "network")):  # H100: 8 GPUs per node, TP 1
        cm = AnalyticCostModel(job(ep=ep), terms=CostTerms.legacy())
        lm = cm.cal.link("all_to_all", link)
        one = lm.base_s + (ep - 1) * lm.hop_s + nbytes * (ep - 1) / ep / (lm.busbw_gbs * 1e9)
        c = cm.group_costs(one_group(T))
        assert c.fwd_ep_comm_s[0] == pytest.approx(LAYERS * 2 * one, rel=1e-12)
        assert c.fwd_comm_s[0] == c.bwd_comm_s[0] == 0.0  # one rank: no CP communication; EP has its own field
        assert c.bwd_ep_comm_s[0] == pytest.approx(
            2 * c.fwd_ep_comm_s[0], rel=1e-12
        )  # recomputed forward dispatches again
    no_re = AnalyticCostModel(job(ep=8, recompute=False), terms=CostTerms.legacy()).group_costs(one_group(T))
    assert no_re.bwd_ep_comm_s[0] == pytest.approx(no_re.fwd_ep_comm_s[0], rel=1e-12)
    assert AnalyticCostModel(job(ep=1), terms=CostTerms.legacy()).group_costs(one_group(T)).fwd_ep_comm_s[0] == 0


def test_recompute_adds_one_forward_of_the_moe_part_to_the_backward():
    T = 4096
    cal = published_calibration(get_gpu("h100"))
    a = AnalyticCostModel(job(ep=4, recompute=True), cal, CostTerms.legacy()).group_costs(one_group(T))
    b = AnalyticCostModel(job(ep=4, recompute=False), cal, CostTerms.legacy()).group_costs(one_group(T))
    extra = LAYERS * (
        cal.gemm.seconds(2 * ROUTER * T, T) + cal.gemm.seconds(2 * K * EXPERT * T, 4 * T * K / E)
    )
    assert a.bwd_compute_s[0] - b.bwd_compute_s[0] == pytest.approx(extra, rel=1e-9)
    assert a.fwd_compute_s[0] == b.fwd_compute_s[0]


def test_expert_states_sharded_by_ep_and_optimizer_by_the_pool():
    for ep in (1, 4, 16):
        j = job(ep=ep)
        experts = LAYERS * E * EXPERT
        dense = LAYERS * (ATTN + ROUTER) + 2 * 1000 * H
        hand = dense * (6 + 12 / 16) + experts * (6 / ep + 12 / 16)
        assert model_state_bytes(j, 0) == pytest.approx(hand, rel=1e-12)


def test_expert_gradient_sync_over_the_expert_data_parallel_ranks():
    cal = published_calibration(get_gpu("h100"))
    # EDP = 16 / 16 = 1: nothing to sync
    assert moe.grad_sync_expert_s(job(ep=16), cal, 0, "network", 1.0, 1.0, 4.0) == 0.0
    params = LAYERS * E * EXPERT / 4  # this GPU's experts: fp32 gradients reduce-scattered, bf16 weights gathered
    rs, ag = cal.link("reduce_scatter", "network"), cal.link("all_gather", "network")
    hand = sum(lm.base_s + 3 * lm.hop_s + params * b * 3 / 4 / (lm.busbw_gbs * 1e9) for lm, b in ((rs, 4.0), (ag, 2.0)))
    assert moe.grad_sync_expert_s(job(ep=4), cal, 0, "network", 1.0, 1.0, 4.0) == pytest.approx(hand, rel=1e-12)
    bf16 = sum(lm.base_s + 3 * lm.hop_s + params * 2.0 * 3 / 4 / (lm.busbw_gbs * 1e9) for lm in (rs, ag))
    assert moe.grad_sync_expert_s(job(ep=4), cal, 0, "network", 1.0, 1.0, 2.0) == pytest.approx(bf16, rel=1e-12)


def test_moe_activations_by_hand():
    legacy = CostTerms.legacy()
    full = (
        15 * H + 2 * H + K * (2 * H + 6 * F_E)
    )  # Korthikanti's 34h less its MLP's 19h, router input, k copies
    assert activation_bytes_per_token(job(recompute=False), legacy) == pytest.approx(LAYERS * full)
    assert activation_bytes_per_token(job(recompute=True), legacy) == pytest.approx(LAYERS * 17 * H)


def test_ep_must_fit_the_pool_the_experts_and_a_moe_model():
    with pytest.raises(SpecError, match="job.ep = 3 is invalid: must make etp · ep = 1 · 3 divide tp · pool = 16"):
        job(ep=3)
    with pytest.raises(SpecError, match="must divide model.experts = 16"):
        job(ep=32, pool=32)
    dense = replace(MODEL, experts=0, experts_per_token=0, expert_ffn=0)
    with pytest.raises(SpecError, match="expert parallelism needs a MoE model"):
        JobSpec(dense, get_gpu("h100"), pool=16, ep=2)


def test_model_flops_count_active_weights():
    cm = AnalyticCostModel(job(ep=4))
    L = np.array([1000, 3000])
    per_layer = 2 * (ATTN + ROUTER + K * EXPERT) * L.sum() + (2 * L.astype(float) ** 2 * 128 * 8).sum()
    assert cm.model_flops(L) == pytest.approx(3 * (LAYERS * per_layer + 2 * H * 1000 * L.sum()), rel=1e-12)


def test_cross_domain_all_to_all_shares_the_nics():
    # H100 with 4 NICs for 8 GPUs: a GPU gets half a NIC, so the bytes a cross-domain all-to-all sends to
    # other domains (8 of the 16 destinations of EP 16 on two 8-GPU nodes) take twice as long
    # (cost_models.topology.p2p_nic_share); inside a domain nothing changes.
    T = 8192
    nbytes = T * K * H * 2.0
    half_nics = replace(get_gpu("h100"), nics_per_node=4)
    for ep, remote_bytes in ((16, nbytes * 8 / 16), (8, 0.0)):
        full = AnalyticCostModel(job(ep=ep)).group_costs(one_group(T)).fwd_ep_comm_s[0]
        half = AnalyticCostModel(replace(job(ep=ep), gpu=half_nics)).group_costs(one_group(T)).fwd_ep_comm_s[0]
        lm = AnalyticCostModel(job(ep=ep)).cal.link("all_to_all", "network")
        assert half - full == pytest.approx(
            LAYERS * 2 * remote_bytes / (lm.busbw_gbs * 1e9), rel=1e-9, abs=1e-12
        )


def test_crossing_all_to_all_priced_by_its_remote_destinations():
    # EP 32 on H100 (TP 1): every GPU has 8 of its 32 destinations in its own node, 24 across. With the links
    # term the 24/32 of the buffer that leaves the node crosses at the network rate (the 7/32 on NVLink runs
    # concurrently and is faster); without it the whole (31/32) buffer does.
    T = 4096
    nbytes = T * K * H * 2.0
    j32 = replace(job(ep=16, pool=32), ep=32, model=replace(MODEL, experts=32))
    by_dest, whole = (
        AnalyticCostModel(j32, terms=t) for t in (CostTerms.parse("legacy,+links"), CostTerms.legacy())
    )
    net = by_dest.cal.link("all_to_all", "network")
    alpha = net.base_s + 31 * net.hop_s
    got = by_dest.group_costs(one_group(T)).fwd_ep_comm_s[0]
    assert got == pytest.approx(LAYERS * 2 * (alpha + nbytes * 24 / 32 / (net.busbw_gbs * 1e9)), rel=1e-12)
    assert whole.group_costs(one_group(T)).fwd_ep_comm_s[0] == pytest.approx(
        LAYERS * 2 * (alpha + nbytes * 31 / 32 / (net.busbw_gbs * 1e9)), rel=1e-12
    )
    assert list(moe.ep_local_members(j32, 0, np.array([0, 5]))) == [8, 8]  # 8 GPUs per NVLink domain


def test_simulation_reports_ep_comm_apart_from_cp_comm():
    """The EP all-to-alls are their own timeline rows (comm 'ep') and metric (ep_comm_s), not CP communication:
    one sequence on one rank (no CP group) has cp_comm_s = 0 and ep_comm_s = its forward + backward EP time,
    and the iteration is compute + EP + sync with nothing else exposed."""
    from dcpsim.policies.plan import CPGroup, Engine, Microbatch, Plan
    from dcpsim.sim.simulate import simulate_plan
    from dcpsim.traces import GlobalBatch

    T = 8192
    j = replace(job(ep=8, pool=8), max_tokens_per_rank=T)
    cm = AnalyticCostModel(j, terms=CostTerms.legacy())
    batch = GlobalBatch(np.arange(8), np.full(8, T), 0)
    plan = Plan("test", 8, (Microbatch(tuple(CPGroup((r,), (r,), Engine("ring", 1, 1)) for r in range(8))),))
    res = simulate_plan(plan, batch, cm)
    c = cm.group_costs(one_group(T))
    ep = float(c.fwd_ep_comm_s[0] + c.bwd_ep_comm_s[0])
    assert ep > 0
    assert res.metrics.cp_comm_s == 0.0
    assert res.metrics.ep_comm_s == pytest.approx(ep, rel=1e-12)
    comm = res.timeline["comm"]
    assert set(np.unique(comm).tolist()) >= {"ep"} and "cp" not in set(comm.tolist())
    # the Chrome trace and the Gantt chart name and colour them as EP, not CP
    from dcpsim.experiments.figures.gantt import categorise
    from dcpsim.experiments.output.chrome_trace import timeline_to_chrome
    names = {e["name"] for e in timeline_to_chrome(res.timeline)["traceEvents"] if e.get("ph") == "X"}
    assert "ep comm" in names and "cp comm" not in names
    assert "ep" in set(categorise(res.timeline.to_frame()).tolist())
    # the rank's operation is compute, then the EP all-to-alls: forward and backward in series
    busy = float(c.fwd_compute_s[0] + c.bwd_compute_s[0]) + ep
    assert res.metrics.iteration_time_s == pytest.approx(busy + cm.grad_sync_s(0) + cm.optimizer_s(0), rel=1e-9)
