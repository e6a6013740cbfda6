"""HyDra's work model prices the heaviest pipeline stage and the fixed costs of extra ring steps."""

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, GroupBatch, JobSpec, get_gpu, get_model
from dcpsim.policies.hydra.degrees import allowed_degrees
from dcpsim.policies.hydra.pricing import group_overhead, sequence_work
from dcpsim.policies.hydra.target import build_target_model
from dcpsim.policies.hydra.work import build_grid


def job(pp=2):
    return JobSpec(get_model("llama3-8b"), get_gpu("h200"), tp=1, pp=pp, pool=8, context_len=65536,
                   max_tokens_per_rank=65536)


def test_work_is_that_of_the_last_stage_when_the_lm_head_makes_it_heaviest():
    cm = AnalyticCostModel(job(), terms=CostTerms.parse("legacy,+lm_head"))
    L = np.array([4096, 16384])
    gb = GroupBatch(L, np.arange(2), np.ones(2, np.int64), np.ones(2, np.int64), np.zeros(2, np.int64))
    last = cm.group_costs(gb, 1).total_s
    assert np.all(last > cm.group_costs(gb, 0).total_s)
    ones = np.ones(2, np.int64)
    got = sequence_work(L, ones, ones, cm) + group_overhead(ones, ones, cm)
    np.testing.assert_allclose(got, last, rtol=1e-9)


def test_extra_ring_steps_enter_the_rank_work():
    """rank_work[j, k] = R_j·D_k·work + count_j·D_k·(overhead(D_k) − overhead(D_0)): with only fixed costs on,
    a ring of 8 pays 7 ring steps per layer more than degree 1 on each of its 8 ranks (on top of the ring's
    exposed latencies)."""
    j = job(pp=1)
    cm = AnalyticCostModel(j, terms=CostTerms.parse("legacy,+fixed_costs"))
    L = np.array([32768, 32768, 65536])
    grid = build_grid(L, allowed_degrees(8, "pow2", 1, "ring", j), "ring", j, cm, 65536)
    tm = build_target_model(grid)
    cal, nl = cm.cal, j.stage_layers(0)
    k8 = list(grid.degrees).index(8)
    step = nl * 7 * (cal.ring_step_overhead_fwd_s + cal.ring_step_overhead_bwd_s)
    no_fixed = AnalyticCostModel(j, terms=CostTerms.legacy())
    o8, o1 = (group_overhead(np.array([c]), np.array([1]), no_fixed)[0] for c in (8, 1))
    # the ring's exposed send/recv latencies at zero tokens are there with or without the fixed costs
    assert grid.overhead[0, k8] - grid.overhead[0, 0] == pytest.approx(o8 - o1 + step, rel=1e-9)
    R = np.bincount(grid.cell, weights=grid.scale, minlength=len(grid.lengths))
    count = np.bincount(grid.cell, minlength=len(grid.lengths))
    used = np.flatnonzero(count)
    extra = grid.overhead[used, k8] - grid.overhead[used, 0]
    expect = R[used] * 8 * grid.work[used, k8] + count[used] * 8 * extra
    np.testing.assert_allclose(tm.rank_work[used, k8], expect, rtol=1e-9)
