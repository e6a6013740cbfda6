"""Stragglers in the simulator (cost_models.stragglers, sim.engine): closed forms on the constant cost model
(forward 1 ms and backward 2 ms per 1,000 tokens per rank, free transfers and sync)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost_models.stragglers import Stragglers
from dcpsim.sim.simulate import simulate_plan
from tests.conftest import constant_model
from tests.sim.test_engine import uniform_plan


def with_stragglers(cm, slow_ranks: str = "", stragglers: str = ""):
    return replace(cm, job=replace(cm.job, stragglers=Stragglers.parse(slow_ranks, stragglers)))


def compute_records(res, stage: int, rank: int):
    tl = res.timeline
    sel = (tl["kind"] == "compute") & (tl["stage"] == stage) & (tl["rank"] == rank) & (tl["microbatch"] >= 0)
    order = np.lexsort((tl["phase"][sel], tl["microbatch"][sel]))
    return (tl["end"][sel] - tl["start"][sel])[order]


@pytest.mark.parametrize("f", [1.0, 1.3, 2.5])
def test_one_slow_rank_without_pipeline_takes_exactly_f_times_longer(f):
    # PP 1, 4 ranks, 4 microbatches of one 1,000-token sequence per rank: rank 2 alone runs 4 × (1 + 2) ms × f
    plan, batch = uniform_plan(4, 4)
    cm = constant_model(pool=4)
    fast = simulate_plan(plan, batch, cm)
    slow = simulate_plan(plan, batch, with_stragglers(cm, f"2={f}"))
    assert fast.metrics.iteration_time_s == pytest.approx(12e-3)
    assert slow.metrics.iteration_time_s == pytest.approx(12e-3 * f)
    np.testing.assert_allclose(compute_records(slow, 0, 2), compute_records(fast, 0, 2) * f)
    for r in (0, 1, 3):  # the others' operations are untouched: they only wait (the DP wait) for rank 2
        np.testing.assert_allclose(compute_records(slow, 0, r), compute_records(fast, 0, r))
    # DP bubble: 3 ranks wait (f − 1) · 12 ms of an iteration of f · 12 ms
    assert slow.metrics.dp_bubble == pytest.approx(3 / 4 * (f - 1) / f)


def test_a_slow_rank_slows_exactly_the_microbatches_of_its_group():
    # microbatches 0, 1: groups {0,1} and {2,3}; a slow rank 3 slows the {2,3} groups' operations by 1.5, those
    # of {0,1} not at all. PP 1: ranks 2 and 3 run (1 + 2) ms × 2 microbatches × 1.5 = 9 ms (2,000 tokens / 2).
    plan, batch = uniform_plan(4, 2, c=2)
    cm = constant_model(pool=4)
    fast = simulate_plan(plan, batch, cm)
    slow = simulate_plan(plan, batch, with_stragglers(cm, "3=1.5"))
    for r, f in ((0, 1.0), (1, 1.0), (2, 1.5), (3, 1.5)):
        np.testing.assert_allclose(compute_records(slow, 0, r), compute_records(fast, 0, r) * f)
    assert slow.metrics.iteration_time_s == pytest.approx(1.5 * fast.metrics.iteration_time_s)


def test_stage_form_slows_one_stage_only_and_the_rank_form_every_stage():
    # PP 2, m = 4, one 1,000-token sequence per rank and microbatch (t_f = 1 ms, t_b = 2 ms)
    plan, batch = uniform_plan(4, 4)
    cm = constant_model(pp=2, pool=4)
    fast = simulate_plan(plan, batch, cm)
    one = simulate_plan(plan, batch, with_stragglers(cm, "s1r2=2"))
    every = simulate_plan(plan, batch, with_stragglers(cm, "2=2"))
    np.testing.assert_allclose(compute_records(one, 1, 2), 2 * compute_records(fast, 1, 2))
    np.testing.assert_allclose(compute_records(one, 0, 2), compute_records(fast, 0, 2))
    for s in (0, 1):
        np.testing.assert_allclose(compute_records(every, s, 2), 2 * compute_records(fast, s, 2))
    # every stage of pipeline 2 at half speed: the pipeline of rank 2 is the uniform 1F1B at twice the times
    assert every.metrics.iteration_time_s == pytest.approx(2 * (4 + 2 - 1) * 3e-3)
    assert fast.metrics.iteration_time_s < one.metrics.iteration_time_s < every.metrics.iteration_time_s


def test_the_engines_slowdown_argument_and_the_jobs_stragglers_agree():
    plan, batch = uniform_plan(4, 3)
    cm = constant_model(pp=2, pool=4)
    a = simulate_plan(plan, batch, cm, slowdown={1: 1.7})
    b = simulate_plan(plan, batch, with_stragglers(cm, "1=1.7"))
    assert a.metrics.iteration_time_s == b.metrics.iteration_time_s


def test_factors_of_each_form():
    s = Stragglers.parse("3=1.3,s1r0=1.5,gpu13=2")
    f = s.factors(pp=2, pool=4, tp=2)  # gpu13 → rank 13 // 2 = 6 = stage 1, pool rank 2 (Megatron's order)
    expected = np.ones((2, 4))
    expected[:, 3] = 1.3
    expected[1, 0] = 1.5
    expected[1, 2] = 2.0
    np.testing.assert_array_equal(f, expected)
    # a slot named twice keeps the larger factor
    np.testing.assert_array_equal(Stragglers.parse("1=1.2,s0r1=1.1").factors(1, 2), [[1.0, 1.2]])
    assert not Stragglers() and Stragglers.parse("0=1")


@pytest.mark.parametrize("dist", ["fixed:1.5", "uniform:1.2:1.8", "lognormal:1.3:0.5"])
def test_random_model_draws_round_fraction_slots_deterministically(dist):
    s = Stragglers.parse("", f"fraction=0.25,slowdown={dist},seed=7")
    f = s.factors(pp=4, pool=8)  # 32 slots → 8 stragglers
    assert int((f > 1.0).sum()) == 8 and f.min() >= 1.0
    np.testing.assert_array_equal(f, s.factors(pp=4, pool=8))  # a pure function of the spec
    other = Stragglers.parse("", f"fraction=0.25,slowdown={dist},seed=8").factors(pp=4, pool=8)
    assert not np.array_equal(f, other)
    if dist == "fixed:1.5":
        assert set(f[f > 1].tolist()) == {1.5}
    if dist.startswith("uniform"):
        assert f[f > 1].min() >= 1.2 and f[f > 1].max() <= 1.8


def test_lognormal_median_is_m():
    f = Stragglers.parse("", "fraction=1,slowdown=lognormal:1.4:0.6,seed=0").factors(pp=1, pool=20_001)
    assert np.median(f) == pytest.approx(1.4, rel=0.02)
