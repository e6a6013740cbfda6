"""Unit tests of the ``hydra`` policy: the closed-form target, degrees from load, the sorted-list and heap placement,
the engine choice, non-power-of-two pools, ``degrees="any"``, the 1F1B order, and the error messages."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import Engine, PolicyError, create_policy, validate_plan
from dcpsim.policies.hydra import HyDra, rank_loads
from dcpsim.policies.hydra.degrees import allowed_degrees, cell_degrees, engine_options
from dcpsim.policies.hydra.order import FORWARD_FRACTION, best_order, candidate_orders, makespans
from dcpsim.policies.hydra.placement import Packer, place
from dcpsim.policies.hydra.pricing import group_overhead, sequence_work
from dcpsim.policies.hydra.target import build_target_model, pack_heavy, solve_tau
from dcpsim.policies.hydra.work import build_grid
from dcpsim.policies.registry import available_policies, policy_options
from dcpsim.traces.batching import GlobalBatch
from dcpsim.traces.errors import TraceError


def makespan(heights, p: int, phi: float = FORWARD_FRACTION, stage_scale=None) -> float:
    """One order's 1F1B makespan (order.makespans of one row)."""
    return float(makespans(np.asarray(heights, dtype=np.float64)[None, :], p, phi, stage_scale)[0])


def batch_of(lengths) -> GlobalBatch:
    """Ids 10, 11, ...: offset from the positions, so a plan that confused the two would fail the tests."""
    return GlobalBatch.of(lengths, ids=np.arange(len(lengths), dtype=np.int64) + 10)


def job_of(pool: int = 16, pp: int = 1, budget: int | None = None, model: str = "llama3-8b", tp: int = 1):
    return JobSpec(get_model(model), get_gpu("h200"), tp=tp, pp=pp, pool=pool, context_len=262144,
                   max_tokens_per_rank=budget)


def check(plan, batch, job, budget):
    validate_plan(plan, batch, max_tokens_per_rank=budget, kv_heads_per_rank=job.kv_heads_per_rank,
                  heads_per_rank=job.heads_per_rank)


def degrees_of(plan) -> dict[int, int]:
    return plan.degrees()


# ---- registry and options ----------------------------------------------------------------------------------

def test_registered_with_its_options() -> None:
    assert "hydra" in available_policies()
    opts = policy_options("hydra")
    assert opts == {"cp_engine": "auto", "degrees": "auto", "min_cp_size": 1, "tolerance": 0.05,
                    "num_microbatches": None, "max_seqlen_per_rank": None, "profile": None,
                    "m_candidates": None, "target": "fixed-point"}
    assert isinstance(create_policy("hydra", cp_engine="ring"), HyDra)


# ---- the work model ------------------------------------------------------------------------------------------

def test_work_model_adds_up_to_the_group_cost_for_gemm_attention_and_ulysses() -> None:
    """overhead + Σ work equals the cost model's price of a packed group where the costs are additive
    (GEMMs are affine in tokens, attention is per sequence, all-to-alls are affine): Ulysses inside a node."""
    from dcpsim.cost_models.base import GroupBatch

    job = job_of(pool=8)
    cm = AnalyticCostModel(job)
    L = np.array([1000, 5000, 20000])
    gb = GroupBatch(L, np.zeros(3, dtype=np.int64), np.array([8]), np.array([8]), np.array([0]))
    packed = float(cm.group_costs(gb).total_s[0])
    ours = float(group_overhead(np.array([8]), np.array([8]), cm)[0]
                 + sequence_work(L, np.full(3, 8), np.full(3, 8), cm).sum())
    assert ours == pytest.approx(packed, rel=1e-6)  # the overhead probe sees a 1-token attention term


def test_work_model_is_conservative_for_the_ring() -> None:
    """A ring hides one sequence's transfers behind another's attention: the sum of isolated works is an
    upper bound of the packed group's price."""
    from dcpsim.cost_models.base import GroupBatch

    job = job_of(pool=16)
    cm = AnalyticCostModel(job)
    L = np.array([2000, 3000, 200000])
    gb = GroupBatch(L, np.zeros(3, dtype=np.int64), np.array([16]), np.array([1]), np.array([0]))
    packed = float(cm.group_costs(gb).total_s[0])
    ours = float(group_overhead(np.array([16]), np.array([1]), cm)[0]
                 + sequence_work(L, np.full(3, 16), np.ones(3, dtype=np.int64), cm).sum())
    assert ours >= packed * (1 - 1e-12)


def test_allowed_degrees() -> None:
    job = job_of(pool=12)
    assert allowed_degrees(12, "pow2", 1, "auto", job).tolist() == [1, 2, 4, 8, 12]
    assert allowed_degrees(16, "pow2", 3, "auto", job_of(16)).tolist() == [4, 8, 16]
    assert allowed_degrees(6, "any", 1, "auto", job_of(6)).tolist() == [1, 2, 3, 4, 5, 6]
    # Pure Ulysses spans at most the KV heads per rank (8 for llama3-8b at TP 1) inside one node.
    assert allowed_degrees(16, "pow2", 1, "ulysses", job_of(16)).tolist() == [1, 2, 4, 8]
    with pytest.raises(PolicyError, match="degrees = 'odd'"):
        allowed_degrees(16, "odd", 1, "auto", job_of(16))
    with pytest.raises(PolicyError, match="min_cp_size = 20"):
        allowed_degrees(16, "pow2", 20, "auto", job_of(16))


# ---- the target ------------------------------------------------------------------------------------------

def test_target_is_total_work_over_rank_slots_without_communication() -> None:
    """With time ∝ tokens per rank and no communication, work is the same on any degree, so F(τ) is the
    constant Σ 3·k·L and the target is its closed form Σ 3kL / (W·m)."""
    job = job_of(pool=8)
    cm = ConstantCostModel(job, fwd_s_per_token=1e-6)
    rng = np.random.default_rng(3)
    L = rng.integers(100, 50_000, 200)
    for m in (1, 3, 7):
        plan = create_policy("hydra", num_microbatches=m).plan(batch_of(L), job, cm)
        assert plan.meta["target_s"] == pytest.approx(3e-6 * L.sum() / (8 * m), rel=1e-9)


def test_target_is_the_fixed_point_with_communication() -> None:
    """τ = F(τ)/(W·m) + ō with F(τ) the total rank-work (compute and communication) at the degrees τ asks for:
    the solver returns the smallest τ at or above that right-hand side."""
    job = job_of(pool=16)
    cm = AnalyticCostModel(job)
    rng = np.random.default_rng(0)
    M = cm.max_tokens_per_rank()  # every length must fit the pool (16·M < 256K once the logits are counted)
    L = np.minimum(16 * M, np.maximum(64, rng.lognormal(8.5, 1.5, 400))).astype(np.int64)
    grid = build_grid(L, allowed_degrees(16, "pow2", 1, "auto", job), "auto", job, cm, M)
    tm = build_target_model(grid)

    def rhs(tau: float, m: int) -> float:
        k, _ = cell_degrees(grid, tm, tau)
        used = np.bincount(grid.cell, minlength=len(grid.lengths)) > 0
        F = tm.rank_work[np.flatnonzero(used), k[used]].sum()
        return F / (16 * m) + tm.slot_overhead

    for m in (4, 12, 40):
        tau = solve_tau(tm, 16, m)
        assert tau >= rhs(tau, m) * (1 - 1e-9)
        below = tau * (1 - 1e-6)
        assert below < rhs(below, m)
    # A smaller target asks for higher degrees, hence more communication: F grows as τ falls.
    assert rhs(solve_tau(tm, 16, 40), 1) >= rhs(solve_tau(tm, 16, 4), 1)


def test_microbatch_count_follows_the_pipeline_depth() -> None:
    """Without heavy sequences or overheads, one stage needs only what memory asks for, while deeper pipelines
    take more microbatches to shrink the (p − 1)/(m + p − 1) bubble."""
    L = np.full(2048, 512)
    m_of = {}
    for pp in (1, 4):
        job = job_of(pool=8, pp=pp, budget=16384)
        cm = ConstantCostModel(job)
        m_of[pp] = create_policy("hydra").plan(batch_of(L), job, cm).num_microbatches
    assert m_of[1] == int(np.ceil(L.sum() / (0.92 * 8 * 16384)))
    assert m_of[4] > m_of[1]


# ---- degrees from load, not memory -----------------------------------------------------------------------

def test_long_sequences_get_more_ranks_than_memory_needs() -> None:
    job = job_of(pool=16, pp=4, budget=200_000)  # memory alone would put every sequence on one rank
    cm = AnalyticCostModel(job)
    L = [131072] + [2048] * 300
    batch = batch_of(L)
    plan = create_policy("hydra").plan(batch, job, cm)
    check(plan, batch, job, 200_000)
    deg = degrees_of(plan)
    assert deg[10] >= 8  # the long one is split by load
    assert np.median([deg[i] for i in range(11, 311)]) == 1


def test_degree_never_below_the_memory_minimum() -> None:
    job = job_of(pool=16, budget=4096)
    cm = AnalyticCostModel(job)
    L = [60000, 30000, 9000, 4097, 4096, 100]
    plan = create_policy("hydra", tolerance=1.0).plan(batch_of(L), job, cm)
    deg = degrees_of(plan)
    for i, n in enumerate(L):
        assert deg[10 + i] >= -(-n // 4096)


# ---- placement ---------------------------------------------------------------------------------------------

def test_class_list_stays_sorted_by_room_and_picks_the_roomiest_bin() -> None:
    pk = Packer(pool=4, budget=100.0, tau=1.0, tol=0.0, aligned=True, overhead={(1, 1): 0.0})
    k = pk.new_mb()
    for i in range(4):
        pk.carve(k, 1, 1, 100 + i, 0.0, 0.0)  # empty groups (a placeholder sequence of no work)
    pk.add(0, 0, 0.5, 10.0)
    pk.add(0, 1, 0.2, 10.0)  # bin 0 moved twice: it leaves the list and re-enters, never twice in it
    pk.add(1, 2, 0.3, 10.0)
    entries = pk.classes[(1, 1)]
    assert entries == sorted(entries) and sorted(g for _, g in entries) == [0, 1, 2, 3]
    assert [key for key, _ in entries] == pytest.approx([-1.0, -1.0, -0.7, -0.3])
    gid = pk.best_in_class((1, 1), 0.1, 1.0, strict=False)
    assert gid == 2
    pk.add(2, 3, 0.9, 1.0)
    pk.add(3, 4, 0.9, 1.0)
    gid = pk.best_in_class((1, 1), 0.1, 1.0, strict=False)
    assert gid == 1  # load 0.3, the roomiest now
    assert pk.best_in_class((1, 1), 0.9, 1.0, strict=False) is None  # nothing has room for 0.9
    assert pk.free == [(0, -1.0, k)]  # the microbatch, once, with no free ranks left


def test_token_budget_sets_bins_aside_without_losing_them() -> None:
    pk = Packer(pool=2, budget=10.0, tau=1.0, tol=0.0, aligned=True, overhead={(1, 1): 0.0})
    k = pk.new_mb()
    pk.carve(k, 1, 1, 100, 0.0, 0.0)
    pk.carve(k, 1, 1, 101, 0.0, 0.0)
    pk.add(0, 0, 0.1, 9.0)  # roomiest by load, but nearly out of tokens
    pk.add(1, 1, 0.5, 1.0)
    assert pk.best_in_class((1, 1), 0.1, 5.0, strict=False) == 1
    assert pk.best_in_class((1, 1), 0.1, 1.0,
                            strict=False) == 0  # set aside for the 5-token item, back in the heap for this one


def test_fill_balances_equal_items_like_lpt() -> None:
    n, W = 97, 8
    shares = np.full(n, 0.01)
    lay = place(pool=W, budget=1e9, tau=1.0, tol=0.05, aligned=True, lengths=np.full(n, 100),
                sizes=np.ones(n, dtype=np.int64), ulysses=np.ones(n, dtype=np.int64), shares=shares,
                heavy=np.zeros(n, dtype=bool), m_light=1, order_key=np.arange(n), overhead={(1, 1): 0.0},
                fill=(1, 1), fill_work=lambda pos, s, u: np.full(len(pos), 0.01 / s),
                fill_estimate=lambda pos, s, u: None)
    loads = np.sort(lay.load)
    assert loads[-1] - loads[0] <= 0.01 + 1e-12
    assert (lay.seq_group >= 0).all() and np.bincount(lay.seq_group).sum() == n
    # every group's load is its sequences' work (0.01 each, no overhead)
    assert np.allclose(lay.load, 0.01 * np.bincount(lay.seq_group, minlength=len(lay.load)))


def test_fill_never_overfills_a_group_when_the_estimate_runs_low() -> None:
    """Phase B ranks other classes by ``fill_estimate`` and prices what lands there at the end; an estimate
    below the price must not leave a group above its capacity (its fill sequences go back to fill groups)."""
    # one 2-rank structure group with load 0.5 of capacity 1.05; fill sequences of work 0.3 at degree 1 and
    # in the 2-rank group too (per rank), which the estimate claims is 0.05
    n = 7
    lengths = np.r_[4000, np.full(n - 1, 100)]
    sizes = np.r_[2, np.ones(n - 1, dtype=np.int64)]
    shares = np.r_[0.5, np.full(n - 1, 0.3)]
    kw = dict(pool=4, budget=1e9, tau=1.0, tol=0.05, aligned=True, lengths=lengths, sizes=sizes,
              ulysses=np.ones(n, dtype=np.int64), shares=shares, heavy=np.zeros(n, dtype=bool), m_light=1,
              order_key=np.arange(n), overhead={(1, 1): 0.0, (2, 1): 0.0}, fill=(1, 1),
              fill_work=lambda pos, s, u: np.full(len(pos), 0.3))
    lay = place(**kw, fill_estimate=lambda pos, s, u: np.full(len(pos), 0.05))
    cap = np.asarray(lay.caps)[lay.mb]
    assert (lay.load <= cap * (1 + 1e-12)).all()
    assert (lay.seq_group >= 0).all()
    # the loads are the exact prices: 0.5 + 0.3·k in the 2-rank group, 0.3·k in the 1-rank ones
    k = np.bincount(lay.seq_group, minlength=len(lay.load)) - (lay.size == 2)
    assert np.allclose(lay.load, np.where(lay.size == 2, 0.5 + 0.3 * k, 0.3 * k))
    # LPT by room: the two free ranks take 0.3, 0.3, 0.6, 0.6; the low estimate then lured the last two into
    # the 2-rank group (room 0.55, estimate 0.05 each); priced, 0.5 + 0.6 > 1.05, so they went back to the
    # free ranks (0.9 each): the group holds its own sequence only
    assert lay.load[lay.size == 2].tolist() == [0.5]
    assert sorted(lay.load.tolist()) == pytest.approx([0.5, 0.9, 0.9])
    # with a truthful estimate the group's room (0.55) beats the free ranks' (0.45) once: 0.5 + 0.3; the last
    # goes to a free rank (0.9)
    honest = place(**kw, fill_estimate=lambda pos, s, u: np.full(len(pos), 0.3))
    assert sorted(honest.load.tolist()) == pytest.approx([0.6, 0.8, 0.9])


def test_pack_heavy_is_first_fit_by_free_ranks() -> None:
    where, height = pack_heavy(np.array([3.0, 2.0, 1.0, 5.0]), np.array([8, 8, 4, 16]), 16)
    assert where.tolist() == [1, 1, 2, 0] and height.tolist() == [5.0, 3.0, 1.0]


# ---- engines -------------------------------------------------------------------------------------------------

def test_auto_engine_is_the_cheapest_split_per_group() -> None:
    job = job_of(pool=16, pp=4)
    cm = AnalyticCostModel(job)
    batch = batch_of([240_000] + [3000] * 200)
    plan = create_policy("hydra").plan(batch, job, cm)
    check(plan, batch, job, cm.max_tokens_per_rank())
    length = dict(zip(batch.seq_ids.tolist(), batch.lengths.tolist()))
    seen16 = False
    for mb in plan.microbatches:
        for g in mb.groups:
            L = np.array([length[s] for s in g.seq_ids])
            n = len(L)

            def load(u: int, g=g, L=L, n=n) -> float:
                return float(group_overhead(np.array([g.size]), np.array([u]), cm)[0]
                             + sequence_work(L, np.full(n, g.size), np.full(n, u), cm).sum())
            assert load(g.engine.ulysses) <= min(load(u) for u in engine_options(g.size, "auto", job)) * (1 + 1e-9)
            if g.size == 16:
                seen16 = True
                assert g.engine == Engine("hybrid", 8, 2)  # Ulysses inside the node, ring across two
    assert seen16


@pytest.mark.parametrize("kind", ["ring", "hybrid"])
def test_fixed_engine_kinds(kind: str) -> None:
    job = job_of(pool=16, pp=4)
    cm = AnalyticCostModel(job)
    batch = batch_of([200_000] + [3000] * 100)
    plan = create_policy("hydra", cp_engine=kind).plan(batch, job, cm)
    check(plan, batch, job, cm.max_tokens_per_rank())
    for mb in plan.microbatches:
        for g in mb.groups:
            if g.size == 1:
                continue
            if kind == "ring":
                assert g.engine.kind == "ring"
            else:
                assert g.engine.ulysses == min(8, max(u for u in range(1, 9) if g.size % u == 0))


def test_ulysses_only_cannot_span_more_than_the_kv_heads() -> None:
    job = job_of(pool=16, budget=10_000)
    with pytest.raises(PolicyError, match="more than the largest allowed CP group holds: 8 ranks"):
        create_policy("hydra", cp_engine="ulysses").plan(batch_of([100_000, 500]), job, AnalyticCostModel(job))


# ---- pools that are not powers of two, degrees="any" -------------------------------------------------------

@pytest.mark.parametrize("pool", [3, 6, 12, 24, 40])
def test_non_power_of_two_pools(pool: int) -> None:
    budget = 8192
    job = job_of(pool=pool, pp=2, budget=budget)
    cm = AnalyticCostModel(job)
    rng = np.random.default_rng(pool)
    L = np.minimum(pool * budget, np.maximum(1, rng.lognormal(8.0, 1.7, 300))).astype(np.int64)
    L[0] = pool * budget  # needs the whole pool
    batch = batch_of(L)
    plan = create_policy("hydra", degrees="pow2").plan(batch, job, cm)
    check(plan, batch, job, budget)
    deg = degrees_of(plan)
    assert deg[10] == pool
    for mb in plan.microbatches:
        for g in mb.groups:
            assert g.size == pool or (g.size & (g.size - 1) == 0 and g.ranks[0] % g.size == 0)


def test_degrees_any_uses_sizes_pow2_cannot() -> None:
    """A sequence of 2.5 M tokens on a pool of 6 needs 3 ranks; with a target loose enough for 3, "any" gives
    it exactly 3 while "pow2" rounds up to 4."""
    M = 10_000
    job = job_of(pool=6, budget=M)
    cm = ConstantCostModel(job)
    batch = batch_of([25_000] + [1_000] * 30)
    plans = {mode: create_policy("hydra", degrees=mode, num_microbatches=1).plan(batch, job, cm)
             for mode in ("pow2", "any")}
    for plan in plans.values():
        check(plan, batch, job, M)
    assert degrees_of(plans["any"])[10] == 3
    assert degrees_of(plans["pow2"])[10] == 4


# ---- heavy sequences and the 1F1B order ----------------------------------------------------------------------

def test_heavy_sequence_gets_its_own_tall_microbatch() -> None:
    job = job_of(pool=16, pp=4)
    cm = AnalyticCostModel(job)
    batch = batch_of([250_000] + [4000] * 500)
    plan = create_policy("hydra").plan(batch, job, cm)
    check(plan, batch, job, cm.max_tokens_per_rank())
    assert plan.meta["heavy_sequences"] >= 1
    loads = rank_loads(plan, batch, cm)
    tall = [k for k, mb in enumerate(plan.microbatches) if any(10 in g.seq_ids for g in mb.groups)]
    assert len(tall) == 1 and loads[tall[0]].max() > plan.meta["target_s"]
    assert (loads.max(axis=1) <= np.asarray(plan.meta["microbatch_caps_s"]) * (1 + 1e-9)).all()


def test_one_f_one_b_recurrence_closed_form() -> None:
    """Uniform microbatches: (m + p − 1)·h, the bubble (p − 1)/(m + p − 1)."""
    for m, p in [(1, 1), (5, 4), (12, 3), (3, 8)]:
        assert makespan(np.ones(m), p) == pytest.approx(m + p - 1)
    H = np.random.default_rng(1).random((5, 9))
    assert makespans(H, 4) == pytest.approx([makespan(h, 4) for h in H])


def test_best_order_keeps_heavy_microbatches_together() -> None:
    h = np.array([3.0, 2.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    heavy = h > 1.5
    orders = candidate_orders(h, heavy, 4)
    for o in orders:
        pos = [int(np.flatnonzero(o == i)[0]) for i in (0, 1)]
        assert abs(pos[0] - pos[1]) == 1
    _order, t = best_order(h, heavy, 4)
    assert t == pytest.approx(min(makespans(h[orders], 4)))
    assert t <= makespan(h, 4) + 1e-12


# ---- errors ----------------------------------------------------------------------------------------------------

def test_sequence_longer_than_the_pool_holds_is_named() -> None:
    job = job_of(pool=8, budget=1000)
    with pytest.raises(PolicyError, match=r"sequence id 11 has 8001 tokens.*8 ranks × 1000 tokens per rank"):
        create_policy("hydra").plan(batch_of([10, 8001, 20]), job, AnalyticCostModel(job))


def test_bad_input_and_options() -> None:
    job = job_of(pool=8, budget=1000)
    cm = AnalyticCostModel(job)
    # A zero length, an empty batch or a repeated id cannot reach a policy: the batch type refuses them.
    with pytest.raises(TraceError, match="sequence 11 has length 0"):
        batch_of([10, 0])
    with pytest.raises(TraceError, match="non-empty"):
        batch_of([])
    with pytest.raises(TraceError, match="sequence id 1 appears twice"):
        GlobalBatch.of([5, 6], ids=[1, 1])
    with pytest.raises(PolicyError, match="degrees = 'odd'"):
        create_policy("hydra", degrees="odd").plan(batch_of([10]), job, cm)
    with pytest.raises(PolicyError, match="cp_engine"):
        create_policy("hydra", cp_engine="torus").plan(batch_of([10]), job, cm)
    with pytest.raises(PolicyError, match="tolerance"):
        create_policy("hydra", tolerance=-1).plan(batch_of([10]), job, cm)
    with pytest.raises(PolicyError, match="num_microbatches"):
        create_policy("hydra", num_microbatches=0).plan(batch_of([10]), job, cm)


def test_budget_option_overrides_the_cost_model() -> None:
    job = job_of(pool=8)
    cm = AnalyticCostModel(job)
    batch = batch_of([5000] * 40)
    plan = create_policy("hydra", max_seqlen_per_rank=6000).plan(batch, job, cm)
    check(plan, batch, job, 6000)
    assert plan.meta["max_tokens_per_rank"] == 6000


def test_cpgroup_many_builds_the_dataclass() -> None:
    """CPGroup.many (the fast constructor HyDra's assembly uses) builds the same frozen object as CPGroup(...)."""
    import dataclasses
    import pickle

    from dcpsim.policies.plan import CPGroup, Engine
    e = Engine("hybrid", 2, 2)
    (a,), b = CPGroup.many([(4, 5, 6, 7)], [(11, 3)], [e]), CPGroup((4, 5, 6, 7), (11, 3), e)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b) and a.size == 4
    assert pickle.loads(pickle.dumps(a)) == b and dataclasses.asdict(a) == dataclasses.asdict(b)
    # CPGroup.many skips __init__: a check added to CPGroup (a __post_init__) must be added to CPGroup.many too
    assert not hasattr(CPGroup, "__post_init__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.ranks = (0,)  # type: ignore[misc]


def test_cpgroup_many_is_cpgroup_of_each() -> None:
    """CPGroup.many (the assembly's batch constructor) builds what CPGroup(...) builds for each triple, in order,
    and refuses inputs of unequal lengths (a short one would leave slots unset)."""
    from dcpsim.policies.plan import CPGroup, Engine
    ranks = [(0,), (1, 2), (4, 5, 6, 7), (3,)]
    seqs = [(5,), (1, 2, 3), (), (9, 8)]
    engines = [Engine(), Engine("ring", 1, 2), Engine("hybrid", 2, 2), Engine()]
    got = CPGroup.many(ranks, seqs, engines)
    assert got == [CPGroup(r, s, e) for r, s, e in zip(ranks, seqs, engines)]
    assert [type(g) for g in got] == [CPGroup] * 4 and [g.size for g in got] == [1, 2, 4, 1]
    assert CPGroup.many([], [], []) == []
    with pytest.raises(ValueError, match="one of each per group"):
        CPGroup.many(ranks, seqs[:3], engines)
