import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, GroupBatch, JobSpec, get_gpu, get_model
from dcpsim.cost_models.calibration import published_calibration
from dcpsim.cost_models.errors import InfeasibleError, SpecError
from dcpsim.cost_models.flops import attention_fwd_flops, linear_fwd_flops_per_token
from tests.conftest import small_job


def one_group(L, c=1, u=1, first=0):
    return GroupBatch(np.array([L]), np.array([0]), np.array([c]), np.array([u]), np.array([first]))


def test_linear_flops_match_closed_form():
    m = get_model("llama3-8b")
    h, f, g, a = m.hidden, m.ffn, m.kv_heads, m.heads
    assert linear_fwd_flops_per_token(m) == pytest.approx(4 * h * h * (1 + g / a) + 6 * h * f)


def test_attention_flops_causal_is_half_of_full():
    m = get_model("llama3-8b")
    assert attention_fwd_flops(1000, m, causal=True) == pytest.approx(2 * 1000**2 * m.head_dim * m.heads)
    assert attention_fwd_flops(1000, m, causal=False) == pytest.approx(2 * attention_fwd_flops(1000, m))


def test_doubling_length_quadruples_attention_and_doubles_linear():
    """At a fixed degree and on the flat part of the efficiency curves, doubling L gives 4x attention and
    2x linear time (the curves are made flat so only the FLOP counts speak)."""
    job = small_job()
    cal = published_calibration(job.gpu)
    from dataclasses import replace
    flat = replace(cal, attn_fwd=replace(cal.attn_fwd, half=1e-9), attn_bwd=replace(cal.attn_bwd, half=1e-9),
                   gemm=replace(cal.gemm, half=1e-9))
    cm = AnalyticCostModel(job, flat, CostTerms.legacy())  # layers only: no LM head, no fixed costs
    m = job.model
    for c in (1, 4):
        a1, a2 = (cm.group_costs(one_group(L, c)) for L in (16384, 32768))
        lin = lambda L, c=c: L / c * linear_fwd_flops_per_token(m) * job.stage_layers(0) / (flat.gemm.peak_tflops *
        1e12)
        att1 = a1.fwd_compute_s[0] - lin(16384)
        att2 = a2.fwd_compute_s[0] - lin(32768)
        assert att2 / att1 == pytest.approx(4.0, rel=1e-9)
        assert lin(32768) / lin(16384) == pytest.approx(2.0)
        # backward: 2x linear, 2.5x attention FLOPs (at the bwd curve's peak)
        assert a2.bwd_compute_s[0] > a2.fwd_compute_s[0] * 2


def test_short_blocks_run_less_efficiently():
    """16 documents of 512 tokens and one of 8192 have the same linear work; the short ones do 1/16 of the
    attention FLOPs but, at a lower kernel efficiency, take more than 1/16 of the attention time."""
    cm = AnalyticCostModel(small_job())
    shorts = cm.group_costs(GroupBatch(np.full(16, 512), np.zeros(16, dtype=np.int64), np.array([1]),
                                       np.array([1]), np.array([0]))).fwd_compute_s[0]
    longs = cm.group_costs(one_group(8192)).fwd_compute_s[0]
    lin = cm.cal.gemm.seconds(8192 * linear_fwd_flops_per_token(cm.job.model) * cm.job.stage_layers(0), 8192)
    assert (shorts - lin) / (longs - lin) > 1 / 16 * 1.5


def test_more_ranks_lower_per_rank_compute():
    cm = AnalyticCostModel(small_job())
    c1 = cm.group_costs(one_group(32768, 1)).fwd_compute_s[0]
    c4 = cm.group_costs(one_group(32768, 4)).fwd_compute_s[0]
    assert c4 < c1 / 3


def test_ring_comm_exposed_only_when_compute_cannot_hide_it():
    job = small_job(tp=8, pool=8)  # every CP group crosses nodes
    cm = AnalyticCostModel(job)
    short = cm.group_costs(GroupBatch(np.full(64, 256), np.zeros(64, dtype=np.int64), np.array([8]),
                                      np.array([1]), np.array([0])))
    long = cm.group_costs(one_group(32768 * 4, 8))
    assert short.fwd_comm_s[0] > 0
    assert long.fwd_comm_s[0] == 0.0


def test_ulysses_inside_node_is_cheaper_than_across():
    job = small_job(pool=16)
    cm = AnalyticCostModel(job)
    lens = np.full(32, 1024)
    gb = lambda first: GroupBatch(lens, np.zeros(32, dtype=np.int64), np.array([8]), np.array([8]), np.array([first]))
    inside = cm.group_costs(gb(0)).fwd_comm_s[0]
    across = cm.group_costs(gb(4)).fwd_comm_s[0]
    assert 0 < inside < across


def test_memory_budget_and_infeasible_job():
    job = small_job()
    cm = AnalyticCostModel(job)
    assert 1000 < cm.max_tokens_per_rank() < 10**6
    assert AnalyticCostModel(small_job(max_tokens_per_rank=1234)).max_tokens_per_rank() == 1234
    with pytest.raises(InfeasibleError, match="model states"):
        AnalyticCostModel(small_job(model=get_model("llama3-70b"), pool=1)).max_tokens_per_rank()


def test_bad_job_specs_name_the_field():
    with pytest.raises(SpecError, match="job.pp"):
        small_job(pp=3)
    with pytest.raises(SpecError, match="job.tp"):
        small_job(tp=3)
    with pytest.raises(SpecError, match="unknown GPU preset 'z100'"):
        get_gpu("z100")
    with pytest.raises(SpecError, match="job.pool"):
        JobSpec(get_model("tiny"), get_gpu("h100"), pool=0)


def test_layer_overhead_adds_layers_times_overhead_to_compute_only():
    from dataclasses import replace

    job = small_job()
    cal = replace(published_calibration(job.gpu), layer_overhead_fwd_s=0.0, layer_overhead_bwd_s=0.0)
    groups = GroupBatch(np.array([4096, 1000, 3000, 512]), np.array([0, 1, 1, 2]), np.array([4, 2, 1]),
                        np.array([1, 2, 1]), np.array([0, 4, 6]))
    base = AnalyticCostModel(job, cal).group_costs(groups)
    extra = replace(cal, layer_overhead_fwd_s=3e-4, layer_overhead_bwd_s=7e-4)
    more = AnalyticCostModel(job, extra).group_costs(groups)
    nl = job.stage_layers(0)
    np.testing.assert_allclose(more.fwd_compute_s - base.fwd_compute_s, nl * 3e-4, rtol=1e-12)
    np.testing.assert_allclose(more.bwd_compute_s - base.bwd_compute_s, nl * 7e-4, rtol=1e-12)
    np.testing.assert_array_equal(more.fwd_comm_s, base.fwd_comm_s)
    np.testing.assert_array_equal(more.bwd_comm_s, base.bwd_comm_s)
