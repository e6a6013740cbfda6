"""choose_target (policies/hydra/target.py) scores its close candidates with heavy microbatches by the 1F1B
recurrence, and skips one whose ``makespan_floor`` (Σh + (p − 1)·min h, policies/hydra/order.py) is above a
number already final: the floor never exceeds the recurrence, is exact on uniform heights, and the skip never
changes a plan."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.policies import create_policy
from dcpsim.policies.hydra import target
from dcpsim.policies.hydra.order import candidate_orders, makespan_floor, makespans
from tests.policies.test_hydra_prune import CASES, _case, _groups


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_the_floor_is_the_recurrence_on_uniform_heights(p: int) -> None:
    """(m + p − 1)·h: the closed form of 1F1B on m equal microbatches."""
    for m in (1, 3, 17, 64):
        h = np.full(m, 0.37)
        assert makespan_floor(h, p) == pytest.approx((m + p - 1) * 0.37, rel=1e-12)
        assert makespans(h[None, :], p)[0] == pytest.approx(makespan_floor(h, p), rel=1e-12)


def test_the_floor_never_exceeds_any_orders_makespan() -> None:
    """Random heights with a heavy block, every candidate order, p = 1..8: floor ≤ makespan; and a floor made
    5% higher fails somewhere (the check has teeth)."""
    rng = np.random.default_rng(0)
    tight = 0.0
    for _ in range(300):
        p = int(rng.integers(1, 9))
        m = int(rng.integers(1, 40))
        h = rng.uniform(0.05, 1.0, m) * np.where(rng.random(m) < 0.2, rng.uniform(1, 6), 1.0)
        heavy = np.zeros(m, dtype=bool)
        heavy[:int(rng.integers(0, m + 1))] = True
        t = makespans(h[candidate_orders(h, heavy, p)], p)
        assert makespan_floor(h, p) <= t.min() * (1 + 1e-12)
        tight = max(tight, makespan_floor(h, p) / t.min())
    assert tight * 1.05 > 1.0


@pytest.mark.parametrize("n,w,pp,seed", CASES)
def test_skipping_never_changes_a_plan(n: int, w: int, pp: int, seed: int, monkeypatch) -> None:
    """The plans with the skip are the plans of scoring every close candidate (a floor of −inf)."""
    batch, job, cm = _case(n, w, pp, seed)
    fast = create_policy("hydra").plan(batch, job, cm)
    monkeypatch.setattr(target, "makespan_floor", lambda h, p: -np.inf)
    plain = create_policy("hydra").plan(batch, job, cm)
    assert _groups(fast) == _groups(plain) and fast.meta == plain.meta


def test_the_bench_cell_skips_every_close_candidate(monkeypatch) -> None:
    """At n = 2,048, W = 256 (experiments/bench/scheduler.py) close candidates with heavy microbatches exist
    and none is scored: what the skip's −23% plan time there comes from."""
    batch, job, cm = _case(2048, 256, 4, 0)
    scored, floors = [], []
    best_order, floor = target.best_order, target.makespan_floor
    monkeypatch.setattr(target, "best_order", lambda *a: scored.append(1) or best_order(*a))
    monkeypatch.setattr(target, "makespan_floor", lambda *a: floors.append(1) or floor(*a))
    create_policy("hydra").plan(batch, job, cm)
    assert len(floors) >= 3 and not scored
