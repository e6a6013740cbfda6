"""HyDra's vectorised target search and 1F1B helpers give exactly what their first version gave.

The first version (tests/policies/_hydra_first_version.py, the code before the speed-up, kept verbatim) is the
reference: ``TargetSearch.at`` for every light count, ``choose_target`` with and without a fixed count,
``makespans`` (one level sweep for several columns), ``candidate_orders``, ``height_profiles`` (all profiles
in one recurrence call) must return the same numbers
bit for bit, on small batches of the 256k trace and on random inputs with ties.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, JobSpec, get_gpu, get_model
from dcpsim.policies.hydra import order as hydra_order
from dcpsim.policies.hydra import target as hydra_target

hydra_msearch = hydra_target  # (the target search lives in target.py)
from dcpsim.policies.hydra.degrees import allowed_degrees
from dcpsim.policies.hydra.target import build_target_model
from dcpsim.policies.hydra.work import Pricer, build_grid
from dcpsim.traces import get_preset

from . import _hydra_first_version as first


def same(a, b) -> bool:
    """Equal bit for bit: arrays (shape, dtype kind, values), dataclasses field by field, scalars."""
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    x, y = np.asarray(a), np.asarray(b)
    return x.shape == y.shape and x.dtype.kind == y.dtype.kind and np.array_equal(x, y)


def _target_case(n: int, w: int, pp: int, seed: int, terms: str = "all", microbatches: int = 8):
    """A batch of the 256k trace with the per-rank budget of experiments/bench/scheduler.make_case."""
    lengths = get_preset("256k").sample(n, seed)
    budget = max(int(np.ceil(lengths.sum() / (w * microbatches))), int(np.ceil(lengths.max() / w)))
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=pp, pool=w, context_len=262144,
                  max_tokens_per_rank=budget)
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    D = allowed_degrees(w, "pow2", 1, "auto", job)
    grid = build_grid(lengths, D, "auto", job, cm, budget, pricer=Pricer(lengths, cm))
    return grid, build_target_model(grid), lengths, budget


CASES = [(256, 16, 4, 0, "all"), (512, 64, 4, 1, "all"), (512, 64, 4, 2, "legacy"), (384, 32, 8, 3, "all"),
         (256, 256, 4, 4, "all"), (600, 16, 2, 5, "legacy")]


@pytest.mark.parametrize("n,w,pp,seed,terms", CASES)
def test_target_search_matches_the_first_version(n: int, w: int, pp: int, seed: int, terms: str) -> None:
    grid, tm, lengths, budget = _target_case(n, w, pp, seed, terms)
    heavy_seen = 0
    for capacity in (None, 0.83 * w):
        new = hydra_msearch.TargetSearch(grid, tm, w, pp, lengths, budget, capacity)
        ref = first.TargetSearch(grid, tm, w, pp, lengths, budget, capacity)
        counts = np.arange(1, 161)
        res = new.many(counts[::-1])  # out of order: every count resolved on its own
        for i, m in enumerate(counts[::-1].tolist()):
            want = ref.at(m)
            assert same(res[i], want), (m, capacity)
            assert same(hydra_msearch.TargetSearch(grid, tm, w, pp, lengths, budget, capacity).at(m), want)
            heavy_seen += want.m_heavy > 0
        fresh = partial(hydra_msearch.TargetSearch, grid, tm, w, pp, lengths, budget, capacity)
        for span in (1, 8):
            assert same(hydra_msearch.choose_target(fresh(), span=span),
                        first.choose_target(grid, tm, w, pp, lengths, budget, span=span, capacity=capacity))
        for fixed in (1, 3, 9, 40):
            assert same(hydra_msearch.choose_target(fresh(), fixed),
                        first.choose_target(grid, tm, w, pp, lengths, budget, fixed, capacity=capacity))
        # one search serving a free pick and then fixed counts (as HyDra calls it): the same choices
        shared = hydra_msearch.TargetSearch(grid, tm, w, pp, lengths, budget, capacity)
        for fixed in (None, 9, 3, 40, 9):
            assert same(hydra_msearch.choose_target(shared, fixed),
                        first.choose_target(grid, tm, w, pp, lengths, budget, fixed, capacity=capacity))
    if (n, w) == (256, 16):
        assert heavy_seen > 0  # the heavy-set path is exercised


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_makespans_match_the_first_version(p: int) -> None:
    rng = np.random.default_rng(p)
    mats = [np.round(rng.random((int(rng.integers(1, 7)), m)), 2) for m in (1, 2, 5, 9, 17, 30)]
    for H in mats:
        assert same(hydra_order.makespans(H, p), first.makespans(H, p))
    # a hand calculation: p = 1 runs F then B of each microbatch in turn, the makespan is Σh
    assert hydra_order.makespans(np.array([[1.0, 2.0, 4.0]]), 1)[0] == pytest.approx(7.0)


def test_ramped_is_the_numpy_formula() -> None:
    """ramped's Python floats equal the first version's numpy expression bit for bit, ramps of 1 to 14
    microbatches (numpy sums 8 or more terms pairwise: both paths)."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        r = int(rng.integers(1, 15))
        m = 2 * r + int(rng.integers(1, 40))
        tau, a = float(rng.random() * 3), float(rng.choice([0.25, 0.5, rng.random()]))
        ramp = tau * (a + (1.0 - a) * np.arange(r) / r)
        want = np.r_[ramp, np.full(m - 2 * r, tau + 2.0 * float((tau - ramp).sum()) / (m - 2 * r)), ramp[::-1]]
        got, got_r = hydra_order.ramped(m, tau, 64, r, a)
        assert got_r == r and same(got, want)


def test_orders_and_height_profiles_match_the_first_version() -> None:
    rng = np.random.default_rng(11)
    for _ in range(60):
        m_light, n_heavy, p = int(rng.integers(0, 40)), int(rng.integers(0, 6)), int(rng.integers(1, 9))
        hv = np.round(1.0 + rng.random(n_heavy), 1)
        h = np.r_[hv, np.round(rng.random(m_light), 1)]
        heavy = np.r_[np.ones(n_heavy, dtype=bool), np.zeros(m_light, dtype=bool)]
        for ends in (0, 1, p):
            assert same(hydra_order.candidate_orders(h, heavy, p, ends), first.candidate_orders(h, heavy, p, ends))
            if len(h):
                assert same(hydra_order.best_order(h, heavy, p, ends), first.best_order(h, heavy, p, ends))
        assert same(hydra_order.height_profiles([(m_light, 0.7, hv)], p)[0], first.height_profile(m_light, 0.7, hv, p))


def test_height_profiles_in_one_sweep_match_the_first_version() -> None:
    """Several profiles scored in one recurrence sweep (with and without heavy microbatches, flat ones for
    m < 3 among them) are each the first version's profile."""
    rng = np.random.default_rng(12)
    for p in (1, 2, 4, 8):
        requests = [(2, 0.5, np.zeros(0)), (12, 0.4, np.zeros(0)), (9, 0.3, np.array([1.0, 2.0]))]
        for _ in range(int(rng.integers(1, 6))):
            m_light, n_heavy = int(rng.integers(0, 30)), int(rng.integers(0, 4))
            tau = float(np.round(0.2 + rng.random(), 2))
            requests.append((m_light, tau, np.round(1.5 + rng.random(n_heavy), 1)))
        requests = requests[::-1] if p % 4 == 0 else requests
        got = hydra_order.height_profiles(requests, p)
        assert len(got) == len(requests)
        for (m_light, tau, hv), prof in zip(requests, got):
            assert same(prof, first.height_profile(m_light, tau, hv, p)), (m_light, tau, hv, p)
    assert hydra_order.height_profiles([], 4) == []

