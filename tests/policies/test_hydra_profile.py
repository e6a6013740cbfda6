"""HyDra's microbatch height profile (order.ramped / height_profiles), the ramps' place in the run order,
and the choice among several microbatch counts (option m_candidates)."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import create_policy, validate_plan
from dcpsim.policies.hydra import ANY_MAX_POOL, HyDra, rank_loads
from dcpsim.policies.hydra.order import FORWARD_FRACTION, best_order, height_profiles, makespans, ramped
from dcpsim.policies.pipeline_order import stage_order
from dcpsim.traces import get_preset
from dcpsim.traces.batching import GlobalBatch


def makespan(heights, p: int, phi: float = FORWARD_FRACTION, stage_scale=None) -> float:
    """One order's 1F1B makespan (order.makespans of one row)."""
    return float(makespans(np.asarray(heights, dtype=np.float64)[None, :], p, phi, stage_scale)[0])


def test_ramped_by_hand() -> None:
    # m = 9, τ = 1, p = 4: r = min(4, 3) = 3; a = 0.25: ramp 0.25, 0.5, 0.75 (0.25 + 0.75·j/3); the ramps leave
    # 2 · (0.75 + 0.5 + 0.25) = 3 for the 3 middle ones: 1 + 3/3 = 2 each.
    h, r = ramped(9, 1.0, 4)
    assert r == 3
    assert h == pytest.approx([0.25, 0.5, 0.75, 2.0, 2.0, 2.0, 0.75, 0.5, 0.25])
    assert h.sum() == pytest.approx(9.0)  # the same work
    flat, r0 = ramped(2, 1.0, 4)  # fewer than 3 microbatches: flat
    assert r0 == 0 and flat.tolist() == [1.0, 1.0]


def test_ramp_shortens_fill_and_drain() -> None:
    # Uniform 1F1B over m microbatches of height h on p stages takes (m + p − 1)·h: 7 for m = 6, p = 2, h = 1.
    # The same work ramped, [0.5, 1.25 × 4, 0.5], cannot beat Σh + φ·h_first + (1 − φ)·h_last = 6.5 (stage 1
    # waits for F0 on stage 0, and stage 0 ends with B of the last after stage 1's) and must beat the flat 7.
    assert makespan(np.ones(6), 2, phi=0.5) == pytest.approx(7.0)
    t = makespan(np.array([0.5, 1.25, 1.25, 1.25, 1.25, 0.5]), 2, phi=0.5)
    assert 6.5 - 1e-12 <= t < 7.0


@pytest.mark.parametrize("m,p", [(3, 2), (8, 4), (20, 4), (40, 8)])
def test_height_profile_never_worse_than_flat_by_the_recurrence(m: int, p: int) -> None:
    rng = np.random.default_rng(m * p)
    hv = rng.uniform(1.0, 3.0, size=3)
    prof = height_profiles([(m, 1.0, hv)], p)[0]
    assert prof.sum() == pytest.approx(m)  # work kept
    heavy = np.r_[np.ones(3, dtype=bool), np.zeros(m, dtype=bool)]
    ends = int(np.argmax(prof >= 1.0 - 1e-12))
    t_prof = best_order(np.r_[hv, prof], heavy, p, ends)[1]
    t_flat = best_order(np.r_[hv, np.ones(m)], heavy, p)[1]
    assert t_prof <= t_flat * (1 + 1e-12)
    assert t_prof < t_flat  # and here strictly better: the ramps cut the fill and drain


def test_heavy_block_never_inside_the_ramps() -> None:
    h = np.r_[5.0, ramped(12, 1.0, 4)[0]]
    heavy = np.r_[True, np.zeros(12, dtype=bool)]
    order, _ = best_order(h, heavy, 4, ends=4)
    j = order.index(0)
    assert 4 <= j <= 13 - 1 - 4  # at least the 4 ramp-up before it and the 4 ramp-down after it


def _case(pool: int = 16, pp: int = 4, n: int = 320, seed: int = 3):
    job = JobSpec(get_model("llama3-8b"), get_gpu("h200"), tp=1, pp=pp, pool=pool, context_len=131072,
                  max_tokens_per_rank=16384)
    cm = AnalyticCostModel(job)
    L = np.minimum(get_preset("256k").sample(n, seed), 131072).astype(np.int64)
    return job, cm, GlobalBatch.of(L)


def test_profiled_plan_is_valid_and_ramps_sit_at_the_ends() -> None:
    job, cm, batch = _case()
    plan = create_policy("hydra").plan(batch, job, cm)
    validate_plan(plan, batch, max_tokens_per_rank=cm.max_tokens_per_rank(),
                  kv_heads_per_rank=job.kv_heads_per_rank, heads_per_rank=job.heads_per_rank)
    h = rank_loads(plan, batch, cm).max(axis=1)
    # the first and last microbatches are shorter than the tallest light ones in the middle
    assert h[0] < np.median(h) and h[-1] < np.median(h)
    flat = create_policy("hydra", profile=False, m_candidates=1).plan(batch, job, cm)
    hf = rank_loads(flat, batch, cm).max(axis=1)
    assert makespan(h, job.pp) <= makespan(hf, job.pp) * (1 + 1e-9) or plan.num_microbatches != flat.num_microbatches


def test_m_candidates_keeps_the_plan_with_the_best_recurrence() -> None:
    job, cm, batch = _case(pool=32, pp=8, n=900, seed=5)
    one = create_policy("hydra", m_candidates=1).plan(batch, job, cm)
    three = create_policy("hydra").plan(batch, job, cm)
    assert three.meta["recurrence_s"] <= one.meta["recurrence_s"] * (1 + 1e-12)
    # the recorded score is the recurrence over the plan's own heights, each stage at its recorded share of
    # the heaviest stage's time (the last stage carries the LM head: the others run lighter)
    h = rank_loads(three, batch, cm).max(axis=1)
    scale = three.meta["stage_scale"]
    assert len(scale) == job.pp and max(scale) == pytest.approx(1.0) and min(scale) < 1.0
    assert three.meta["recurrence_s"] == pytest.approx(makespan(h, job.pp, stage_scale=scale), rel=1e-6)
    assert three.meta["recurrence_s"] < makespan(h, job.pp)
    # a fixed microbatch count is not second-guessed: the same plan with one candidate or three
    a = create_policy("hydra", num_microbatches=12).plan(batch, job, cm)
    b = create_policy("hydra", num_microbatches=12, m_candidates=1).plan(batch, job, cm)
    assert a.microbatches == b.microbatches


def test_makespan_with_lighter_stages_by_hand() -> None:
    # One microbatch of height 1 on p = 2 stages, φ = 0.3: F on stage 0, F on stage 1, B on stage 1, B on
    # stage 0 in series. Every stage at the height: 0.3 + 0.3 + 0.7 + 0.7 = 2. Stage 0 at half the height
    # (the last stage carries the LM head): 0.15 + 0.3 + 0.7 + 0.35 = 1.5.
    assert makespan(np.ones(1), 2) == pytest.approx(2.0)
    assert makespan(np.ones(1), 2, stage_scale=np.array([0.5, 1.0])) == pytest.approx(1.5)
    # m = 6 flat on p = 2, φ = 0.5: (m + p − 1)·h = 7 uniform; stage 0 at 0.5 never stalls stage 1, which
    # runs 6 microbatches back to back after stage 0's first forward (0.25) and before its last backward
    # (0.25): 6.5
    assert makespan(np.ones(6), 2, phi=0.5, stage_scale=np.array([0.5, 1.0])) == pytest.approx(6.5)


def _reference_makespan(h: np.ndarray, scale: np.ndarray, phi: float = 0.3) -> float:
    """1F1B by direct simulation: each stage runs its pipeline_order list; an operation starts when its stage
    is free and its dependency (the previous stage's forward, the next stage's backward, or the last stage's
    own forward) has ended; durations φ·h·scale_s and (1 − φ)·h·scale_s."""
    p, m = len(scale), len(h)
    orders = [list(zip(*(a.tolist() for a in stage_order(s, p, m)))) for s in range(p)]
    end_f, end_b = np.full((p, m), np.nan), np.full((p, m), np.nan)
    ptr, free = [0] * p, [0.0] * p
    while any(ptr[s] < 2 * m for s in range(p)):
        for s in range(p):
            while ptr[s] < 2 * m:
                ph, k = orders[s][ptr[s]]
                dep = (0.0 if s == 0 else end_f[s - 1, k]) if ph == 0 else \
                    (end_f[s, k] if s == p - 1 else end_b[s + 1, k])
                if np.isnan(dep):
                    break
                free[s] = max(dep, free[s]) + (phi if ph == 0 else 1 - phi) * h[k] * scale[s]
                (end_f if ph == 0 else end_b)[s, k] = free[s]
                ptr[s] += 1
    return max(free)


def test_makespan_with_stage_scale_equals_a_direct_simulation() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        p, m = int(rng.integers(1, 7)), int(rng.integers(1, 20))
        h, scale = rng.random(m) + 0.05, rng.random(p) + 0.2
        assert makespan(h, p, stage_scale=scale) == pytest.approx(_reference_makespan(h, scale), rel=1e-12)
    # several columns of different lengths in one sweep, scaled, equal one call each
    hs = [rng.random((3, m)) for m in (4, 9, 2)]
    scale = np.array([0.8, 0.9, 1.0])
    many = [makespans(h, 3, stage_scale=scale) for h in hs]
    for h, got in zip(hs, many):
        assert got == pytest.approx([_reference_makespan(r, scale) for r in h], rel=1e-12)


def test_degrees_auto_keeps_the_better_of_pow2_and_any_by_the_recurrence() -> None:
    job, cm, batch = _case(pool=32, pp=8, n=900, seed=5)
    auto = create_policy("hydra").plan(batch, job, cm)
    pow2 = create_policy("hydra", degrees="pow2").plan(batch, job, cm)
    # the any pass also plans the pow2 plan's chosen microbatch count
    anyp = HyDra(degrees="any")._plan(batch, job, cm, extra_m=(pow2.meta["chosen_microbatches"],),
                                      columns=True)
    pow2c = HyDra(degrees="pow2")._plan(batch, job, cm, columns=True)
    assert pow2c.microbatches == pow2.microbatches
    better = anyp if anyp.meta["columns_s"] < pow2c.meta["columns_s"] * (1 - 1e-9) else pow2c
    assert auto.meta["degrees"] == better.meta["degrees"] and auto.microbatches == better.microbatches
    # columns_s: every rank's own loads (the plan's, after the mirroring) through the recurrence, the largest
    for p in (pow2c, anyp):
        cols = makespans(rank_loads(p, batch, cm).T, job.pp, stage_scale=p.meta["stage_scale"]).max()
        assert p.meta["columns_s"] == pytest.approx(cols, rel=1e-6)
        # the heights are the columns' maxima: no column runs slower than they do
        assert p.meta["columns_s"] <= p.meta["recurrence_s"] * (1 + 1e-9)
    # above ANY_MAX_POOL ranks auto is pow2 alone
    big, bcm, bbatch = _case(pool=2 * ANY_MAX_POOL, pp=2, n=600, seed=1)
    a = create_policy("hydra").plan(bbatch, big, bcm)
    assert a.meta["degrees"] == "pow2"
    assert a.microbatches == create_policy("hydra", degrees="pow2").plan(bbatch, big, bcm).microbatches
