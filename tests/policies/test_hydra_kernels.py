"""The optional compiled twins (policies/hydra_kernels.py, the ``fast`` extra) against the plain code they mirror:
the 1F1B recurrence, the mirroring and the fill number for number on random inputs, and HyDra's whole plans with
and without them. Skipped where numba is not installed or ``DCPSIM_KERNELS=0`` turns the twins off."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models.stragglers import NO_STRAGGLERS, Stragglers
from dcpsim.policies import create_policy, hydra_kernels
from dcpsim.policies.hydra.order import balance_columns, makespans
from dcpsim.policies.hydra.placement import place
from dcpsim.traces import get_preset
from dcpsim.traces.batching import GlobalBatch

pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(not hydra_kernels.ON, reason="DCPSIM_KERNELS=0: the twins are off")


def both(monkeypatch, f, *args, **kwargs):
    """``f`` with the twins, then with the plain code."""
    fast = f(*args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(hydra_kernels, "ON", False)
        plain = f(*args, **kwargs)
    return fast, plain


def test_the_plain_switch_reaches_the_plain_code(monkeypatch) -> None:
    """With ``ON`` off the twins are not called (a twin that raised would show it)."""
    def boom(*a, **k):
        raise AssertionError("twin called")
    for name in ("sweep", "balance", "fill"):
        monkeypatch.setattr(hydra_kernels, name, boom)
    monkeypatch.setattr(hydra_kernels, "ON", False)
    assert makespans(np.array([[1.0, 2.0, 4.0]]), 1)[0] == pytest.approx(7.0)
    assert balance_columns(np.ones((2, 4))).shape == (2, 4)
    assert (place(**_place_case(np.random.default_rng(0), slow=False)).seq_group >= 0).all()


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
def test_the_recurrence_twin_is_the_plain_recurrence(monkeypatch, p: int) -> None:
    rng = np.random.default_rng(p)
    for m in (1, 2, 3, 5, 9, 17, 40, 65):
        H = rng.random((int(rng.integers(1, 30)), m)) * (rng.random((1, m)) < 0.9)
        H[:, :2] = np.round(H[:, :2], 1)  # ties
        for scale in (None, rng.random(p)):
            fast, plain = both(monkeypatch, makespans, H, p, stage_scale=scale)
            assert np.array_equal(fast, plain), (m, p)
    # a hand calculation: p = 1 runs F then B of each microbatch in turn, the makespan is Σh
    assert makespans(np.array([[1.0, 2.0, 4.0]]), 1)[0] == pytest.approx(7.0)


def test_the_mirroring_twin_is_the_plain_mirroring(monkeypatch) -> None:
    """Same ``pos`` on pools of 2 to 4,096 ranks, with and without straggler factors, loads with idle ranks and
    ties (block sums: the twin's pairwise summation is numpy's, short blocks and long)."""
    rng = np.random.default_rng(7)
    for trial in range(120):
        W, m = 2 ** int(rng.integers(1, 13)), int(rng.integers(1, 9))
        loads = rng.random((m, W)) * (rng.random((m, W)) < 0.8)
        if trial % 3 == 0:
            loads = np.round(loads, 1)
        slow = None if trial % 2 else 1.0 + rng.random(W)
        fast, plain = both(monkeypatch, balance_columns, loads, slow)
        assert np.array_equal(fast, plain), (W, m, slow is None)


def _place_case(rng: np.random.Generator, slow: bool) -> dict:
    """A random placement: degrees 1, 2, 4 (2 with two engines), a fill at (1, 1), capacities small enough that
    the fill opens microbatches, a token budget that binds, an estimate of the other classes that runs low or high."""
    n, W = int(rng.integers(20, 400)), 8
    sizes = rng.choice([1, 1, 1, 2, 4], n)
    ulysses = np.where((sizes == 2) & (rng.random(n) < 0.5), 2, 1)
    lengths = rng.integers(100, 3000, n) * sizes  # within the budget at their degree
    work = lengths / 4000.0 * (0.2 + rng.random(n))
    bias = float(rng.choice([0.6, 1.0, 1.4]))
    return dict(pool=W, budget=float(rng.choice([1e9, 3000.0])), tau=float(rng.uniform(0.5, 3.0)), tol=0.05,
                aligned=True, lengths=lengths, sizes=sizes, ulysses=ulysses, shares=work / sizes,
                heavy=np.zeros(n, dtype=bool), m_light=int(rng.integers(1, 4)), order_key=rng.permutation(n),
                overhead={(1, 1): 0.01, (2, 1): 0.02, (2, 2): 0.015, (4, 1): 0.03},
                fill=(1, 1), slowdown=1.0 + rng.random(W) if slow else None,
                fill_work=lambda pos, s, u: work[pos] / s * (1.0 + 0.1 * (u > 1)),
                fill_estimate=lambda pos, s, u: bias * work[pos] / s * (1.0 + 0.1 * (u > 1)))


def test_the_fill_twin_places_as_the_plain_fill(monkeypatch) -> None:
    """Every group, load, sequence and microbatch capacity the same, over cases where the fill opens microbatches
    and where a low estimate sends sequences back (the twin's blocked heap rebuilt, ``Fill.heap_up``)."""
    rng = np.random.default_rng(3)
    opened = 0
    for trial in range(40):
        kw = _place_case(rng, slow=trial % 4 == 3)
        fast, plain = both(monkeypatch, place, **kw)
        for field in ("mb", "first", "size", "u", "load", "seq_group", "placed"):
            assert np.array_equal(getattr(fast, field), getattr(plain, field)), (trial, field)
        assert fast.caps == plain.caps, trial
        opened += len(fast.caps) > kw["m_light"]
    assert opened >= 10


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plans_with_the_twins_are_the_plain_plans(monkeypatch, seed: int) -> None:
    lengths = get_preset("256k").sample(600, seed)
    """Pools of 32 (also ``degrees=any``) and 64 ranks, the second with a slow rank (stragglers)."""
    for w, stragglers in ((32, None), (64, "s1r3=1.5")):
        budget = max(int(np.ceil(lengths.sum() / (w * 8))), int(np.ceil(lengths.max() / w)))
        job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=4, pool=w,
                      context_len=int(get_preset("256k").context_len), max_tokens_per_rank=budget,
                      stragglers=NO_STRAGGLERS if stragglers is None else Stragglers.parse(stragglers))
        cm = AnalyticCostModel(job)
        for options in ({}, {"degrees": "any"}):
            fast, plain = both(monkeypatch, create_policy("hydra", **options).plan, GlobalBatch.of(lengths), job, cm)
            assert fast.to_json() == plain.to_json(), (w, options)


def test_a_numba_that_does_not_import_is_one_clear_error(monkeypatch) -> None:
    """numba found but broken (here: its import fails) is a PolicyError naming the way out, not a traceback deep in
    a plan."""
    import sys

    from dcpsim.policies.errors import PolicyError

    monkeypatch.setattr(hydra_kernels, "_JITTED", {})
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    with pytest.raises(PolicyError, match="DCPSIM_KERNELS=0"):
        makespans(np.ones((1, 3)), 2)
