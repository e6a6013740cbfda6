"""sim.bound: hand calculations on the constant cost model, where the bound's terms have closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import ConstantCostModel
from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.policies.plan import CPGroup, Engine, make_plan
from dcpsim.sim.bound import iteration_bound
from dcpsim.sim.simulate import simulate_plan
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job

F = 1e-6  # seconds per token per rank, forward; backward 2x


def _cm(pp=1, pool=2, **kw):
    return ConstantCostModel(small_job(pp=pp, pool=pool, max_tokens_per_rank=1000), fwd_s_per_token=F, **kw)


def test_work_term_two_equal_sequences_two_ranks() -> None:
    # The constant model has no fixed cost (K = 2·compute({1}) − compute({1, 1}) = 2·3F/c − 6F/c = 0), so each
    # sequence's least rank-work is c · 3FL/c = 3FL at every degree: work = 2 · 3FL / W + sync with W = 2.
    cm = _cm(grad_sync=0.01)
    L = 800
    b = iteration_bound(np.array([L, L]), cm)
    assert b.work_s == pytest.approx(3 * F * L + 0.01, rel=1e-12)
    assert b.chain_s == pytest.approx(3 * F * L / 2 + 0.01, rel=1e-12)  # best degree 2 halves the chain
    assert b.bound_s == b.work_s
    # The plan that runs each sequence alone on one rank takes 3FL + sync: it attains the bound.
    plan = make_plan("hand", 2, [[CPGroup((0,), (0,), Engine()), CPGroup((1,), (1,), Engine())]])
    T = simulate_plan(plan, GlobalBatch.of([L, L]), cm).metrics.iteration_time_s
    assert T == pytest.approx(3 * F * L + 0.01, rel=1e-12)
    assert T >= b.bound_s * (1 - 1e-12)


def test_fixed_work_of_a_full_group_is_charged_exactly() -> None:
    # One rank, one stage, the analytic model (fixed costs, GEMM half-saturation, all terms on): sequences that
    # fill the budget M exactly, run as one group, cost compute(S) = Σ a(L_i) + K. The bound charges each
    # sequence c·a(L_i) + L_i·K/M with K = 2·compute({1}) − compute({1, 1}), i.e. exactly Σ a + K: it is
    # attained (up to the validator's 10⁻⁹ memory slack on M). The first version charged a(L_i) − a(1) and
    # an empty group's compute per rank-slot, which misses the GEMM half-saturation term and one a(1) per
    # sequence.
    from dcpsim.cost_models import AnalyticCostModel
    from dcpsim.sim.bound import group_fixed
    cm = AnalyticCostModel(small_job(pool=1, max_tokens_per_rank=8192))
    M = cm.max_tokens_per_rank()
    lens = np.array([M // 2, M // 4, M - M // 2 - M // 4])
    batch = GlobalBatch.of(lens)
    plan = make_plan("hand", 1, [[CPGroup((0,), (0, 1, 2), Engine())]])
    T = simulate_plan(plan, batch, cm).metrics.iteration_time_s
    b = iteration_bound(lens, cm)
    assert b.work_s <= T * (1 + 1e-12)
    assert b.work_s == pytest.approx(T, rel=1e-8)
    kf, kb = group_fixed(cm, 0, np.array([1]), np.array([1]))
    assert float(kf[0] + kb[0]) > 0.0  # there is a fixed cost to charge


def test_chain_is_exact_for_one_sequence_through_two_stages() -> None:
    # p = 2, one rank: F0 + x + F1 + B1 + x + B0 + sync, each stage F·L forward, 2F·L backward.
    cm = _cm(pp=2, pool=1, pp_s=1e-4, grad_sync=0.02)
    L = 500
    b = iteration_bound(np.array([L]), cm)
    want = 2 * 3 * F * L + 2 * 1e-4 + 0.02
    assert b.chain_s == pytest.approx(want, rel=1e-12)
    assert b.bound_s == pytest.approx(want, rel=1e-12)
    plan = make_plan("hand", 1, [[CPGroup((0,), (0,), Engine())]])
    T = simulate_plan(plan, GlobalBatch.of([L]), cm).metrics.iteration_time_s
    assert T == pytest.approx(want, rel=1e-12)  # the bound is attained


def test_fill_and_drain_of_the_work_term() -> None:
    # p = 2: stage 1's busy time waits for one transfer (fill) and is followed by one transfer and stage 0's
    # sync (drain): work = x + 3F Σ L/W + x + sync.
    cm = _cm(pp=2, pool=1, pp_s=1e-3, grad_sync=0.0)
    lens = np.array([100, 200, 300])
    b = iteration_bound(lens, cm)
    assert b.work_stage == 1
    assert b.work_s == pytest.approx(2e-3 + 3 * F * lens.sum(), rel=1e-12)


def test_memory_floor_raises_degrees_and_infeasible_is_one_error() -> None:
    cm = _cm(pool=4)
    # L = 3000 > M = 1000 needs c ≥ 3: the chain is 3F·3000/c at the best c = 4.
    assert iteration_bound(np.array([3000]), cm).chain_s == pytest.approx(3 * F * 3000 / 4, rel=1e-12)
    with pytest.raises(InfeasibleError, match="position 1 has 5000 tokens, more than the pool of 4 ranks"):
        iteration_bound(np.array([10, 5000]), cm)
    # Without a memory constraint the same batch has a bound (degree 1 allowed).
    assert iteration_bound(np.array([10, 5000]), cm, max_tokens_per_rank=None).bound_s > 0


def test_engine_sync_end_is_the_reported_iteration_time() -> None:
    # The property test reads the engine's last sync end instead of building metrics; they must agree.
    from dcpsim.policies.flatten import flatten
    from dcpsim.sim.engine import execute
    cm = _cm(pp=2, pool=2, pp_s=1e-4, grad_sync=0.01)
    batch = GlobalBatch.of([300, 200, 100])
    plan = make_plan("hand", 2, [[CPGroup((0, 1), (0,), Engine.for_size("ring", 2))],
                                 [CPGroup((0,), (1,), Engine()), CPGroup((1,), (2,), Engine())]])
    T = simulate_plan(plan, batch, cm).metrics.iteration_time_s
    assert float(execute(flatten(plan, batch), cm, 2).sync_end.max()) == T


def test_bound_cache_returns_the_same_bound_once_computed() -> None:
    from dcpsim.sim.bound import BoundCache
    cache = BoundCache()
    cm = _cm(pool=2)
    a = cache.get(np.array([800, 800]), cm, 1, 1000)
    assert a == iteration_bound(np.array([800, 800]), cm)
    assert cache.get(np.array([800, 800]), _cm(pool=2), 1, 1000) is a  # an equal cost model: a hit
    assert cache.get(np.array([800, 801]), cm, 1, 1000) is not a
