"""Closed-form and behavioural checks of the simulator (docs/architecture.md, "Simulation semantics")."""

import numpy as np
import pytest

from dcpsim.policies import CPGroup, Engine, make_plan
from dcpsim.sim.simulate import simulate_plan
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import constant_model


def uniform_plan(W: int, m: int, c: int = 1):
    """m microbatches; each rank (group of c) gets one sequence of 1000 tokens per microbatch."""
    mbs, sid = [], 0
    for _ in range(m):
        groups = []
        for j in range(W // c):
            groups.append(CPGroup(tuple(range(j * c, (j + 1) * c)), (sid,), Engine.for_size("ring", c)))
            sid += 1
        mbs.append(groups)
    return make_plan("test", W, mbs), GlobalBatch.of([1000] * sid)


@pytest.mark.parametrize("p,m", [(1, 4), (2, 4), (4, 8), (4, 3), (8, 16), (2, 1)])
def test_uniform_microbatches_give_the_1f1b_bubble(p, m):
    plan, batch = uniform_plan(4, m)
    cm = constant_model(pp=p, pool=4)
    res = simulate_plan(plan, batch, cm, num_stages=p)
    expected = (p - 1) / (m + p - 1)
    assert res.metrics.pipeline_bubble == pytest.approx(expected, rel=0.01, abs=1e-12)
    assert res.metrics.pipeline_bubble_max == pytest.approx(expected, rel=0.01, abs=1e-12)
    # iteration = (m + p − 1)(t_f + t_b) with t_f = 1 ms, t_b = 2 ms
    assert res.metrics.iteration_time_s == pytest.approx((m + p - 1) * 3e-3)
    assert res.metrics.dp_bubble == 0.0


def test_cp_group_with_one_slow_member_delays_every_member():
    # microbatch 0: ranks 0..3 alone; microbatch 1: one group of all 4 ranks
    plan = make_plan("t", 4, [[CPGroup((r,), (r,), Engine()) for r in range(4)],
                              [CPGroup((0, 1, 2, 3), (4,), Engine.for_size("ring", 4))]])
    batch = GlobalBatch.of([1000, 1000, 1000, 1000, 4000])
    cm = constant_model(pool=4)
    fast = simulate_plan(plan, batch, cm)
    slow = simulate_plan(plan, batch, cm, slowdown={2: 3.0})
    tl = slow.timeline
    comp = (tl["kind"] == "compute") & (tl["microbatch"] == 1) & (tl["phase"] == "F")
    starts, ends = tl["start"][comp], tl["end"][comp]
    # every member of the group starts when the slow rank 2 is free and ends together, 3x later than usual
    assert np.all(starts == starts[0]) and np.all(ends == ends[0])
    # PP = 1: each rank runs F0, B0, then F1. Rank 2's F0 + B0 took 3 + 6 ms; the others were free at 3 ms.
    assert starts[0] == pytest.approx(9e-3)
    assert ends[0] - starts[0] == pytest.approx(3e-3)  # 4000/4 tokens per rank, slowed 3x
    assert slow.metrics.iteration_time_s > fast.metrics.iteration_time_s
    # the fast members idle while waiting for rank 2: pipeline bubble > 0 on them
    assert slow.metrics.pipeline_bubble > 0.0


def test_pp_transfer_delays_next_stage_and_is_exposed():
    plan, batch = uniform_plan(2, 2)
    free = simulate_plan(plan, batch, constant_model(pp=2, pool=2), num_stages=2)
    slow = simulate_plan(plan, batch, constant_model(pp=2, pool=2, pp_s=0.5e-3), num_stages=2)
    assert slow.metrics.pp_comm_s > 0
    assert slow.metrics.iteration_time_s == pytest.approx(free.metrics.iteration_time_s + 2 * 0.5e-3)


def test_dp_wait_and_gradient_sync():
    # rank 0 gets twice the tokens: rank 1 waits for it before the sync
    plan = make_plan("t", 2, [[CPGroup((0,), (0,), Engine()), CPGroup((1,), (1,), Engine())]])
    res = simulate_plan(plan, GlobalBatch.of([2000, 1000]), constant_model(pool=2, grad_sync=1e-3))
    m = res.metrics
    T = 6e-3 + 1e-3
    assert m.iteration_time_s == pytest.approx(T)
    assert m.dp_bubble_max == pytest.approx(3e-3 / T)
    assert m.dp_bubble == pytest.approx(1.5e-3 / T)
    assert m.dp_comm_s == pytest.approx(1e-3)
    assert m.pipeline_bubble == pytest.approx(0.0, abs=1e-12)


def test_microbatch_skew_sees_same_tokens_different_time():
    # two groups of 2 ranks, same tokens per rank (4000), one long sequence vs many short ones
    from dcpsim.cost_models import AnalyticCostModel
    from tests.conftest import small_job
    cm = AnalyticCostModel(small_job(pool=4))
    plan = make_plan("t", 4, [[CPGroup((0, 1), (0,), Engine.for_size("ring", 2)),
                               CPGroup((2, 3), tuple(range(1, 33)), Engine.for_size("ring", 2))]])
    res = simulate_plan(plan, GlobalBatch.of([32768] + [1024] * 32), cm)
    assert res.metrics.microbatch_skew_max > 1.5


def test_same_time_event_order_is_pinned():
    """Ops ready at the same instant start in the engine's (time, priority, event id) order: the order in
    which their last dependency finished. Here four independent single-rank groups start at t = 0 in rank
    order, then their backwards in the order their forwards were scheduled."""
    plan = make_plan("t", 4, [[CPGroup((r,), (r,), Engine()) for r in (2, 0, 3, 1)]])
    from dcpsim.policies.flatten import flatten
    from dcpsim.sim.engine import execute
    batch = GlobalBatch.of([1000] * 4)
    ot = execute(flatten(plan, batch), constant_model(pool=4), 1)
    # op index = group*2 + phase; groups listed in plan order (ranks 2, 0, 3, 1)
    order = np.argsort(ot.order)
    assert order.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    again = execute(flatten(plan, batch), constant_model(pool=4), 1)
    assert np.array_equal(again.order, ot.order)


def test_ranks_skip_microbatches_they_are_not_in():
    plan = make_plan("t", 4, [[CPGroup((0, 1), (0,), Engine.for_size("ring", 2))],
                              [CPGroup((2, 3), (1,), Engine.for_size("ring", 2))]])
    res = simulate_plan(plan, GlobalBatch.of([1000, 1000]), constant_model(pool=4))
    assert res.metrics.iteration_time_s == pytest.approx(1.5e-3)


def test_peak_memory_counts_in_flight_microbatches():
    from dcpsim.policies.flatten import flatten
    from dcpsim.sim.simulate import peak_tokens_in_flight
    plan, batch = uniform_plan(2, 6)
    peak = peak_tokens_in_flight(flatten(plan, batch), 4)
    # 1F1B: stage s holds p − s microbatches at once
    assert peak[:, 0].tolist() == [4000, 3000, 2000, 1000]
