"""HyDra stops placing a later microbatch-count candidate once its groups so far (a quarter or halfway through
phase A, or before the fill) already score at least the best draft's (HyDra._structure_bound): the rest of the placement
only adds load, so that candidate cannot win. The bound must
never exceed the score of the finished layout, and pruning must never change a plan."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import create_policy
from dcpsim.policies.hydra import placement as hydra_placement
from dcpsim.policies.hydra import policy as hydra
from dcpsim.traces import get_preset
from dcpsim.traces.batching import GlobalBatch

# (n, W, pp, seed): batches of the 256k trace whose microbatch-count candidates are pruned and not pruned
CASES = [(512, 64, 4, 0), (512, 64, 4, 3), (1024, 32, 4, 1), (2048, 128, 4, 0), (2048, 256, 4, 0),
         (2048, 256, 4, 3), (768, 64, 2, 2), (1024, 64, 8, 4)]


def _case(n: int, w: int, pp: int, seed: int, microbatches: int = 8):
    """The batch, job and cost model of experiments/bench/scheduler.make_case (llama3-8b on H200, TP 1)."""
    lengths = get_preset("256k").sample(n, seed)
    budget = max(int(np.ceil(lengths.sum() / (w * microbatches))), int(np.ceil(lengths.max() / w)))
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=pp, pool=w, context_len=262144,
                  max_tokens_per_rank=budget)
    return GlobalBatch.of(lengths), job, AnalyticCostModel(job)


def _groups(plan) -> list:
    return [[(g.ranks, g.seq_ids, g.engine) for g in mb.groups] for mb in plan.microbatches]


@pytest.mark.parametrize("n,w,pp,seed", CASES)
def test_the_bound_never_exceeds_the_finished_layouts_score(n: int, w: int, pp: int, seed: int,
                                                            monkeypatch) -> None:
    """Every candidate placed after the first: its bounds (a quarter and halfway through phase A, and before the
    fill) ≤ its score (after), with the prune switched off so that every candidate is finished."""
    batch, job, cm = _case(n, w, pp, seed)
    placed: list[list[float]] = []  # per placement: its bounds (none: the first candidate of a pass, unbounded)
    scores: list[float] = []
    place, order, bound = hydra_placement.place, hydra.HyDra._order, hydra.HyDra._structure_bound

    def spy_place(**kw):
        placed.append([])
        return place(**kw)

    def spy_bound(self, *a, **k):
        placed[-1].append(bound(self, *a, **k))
        return -np.inf  # never prune: finish the layout

    def spy_order(self, layout, *a, **k):
        out = order(self, layout, *a, **k)
        scores.append(out[2])
        return out

    monkeypatch.setattr(hydra, "place", spy_place)
    monkeypatch.setattr(hydra.HyDra, "_structure_bound", spy_bound)
    monkeypatch.setattr(hydra.HyDra, "_order", spy_order)
    create_policy("hydra").plan(batch, job, cm)
    assert len(placed) == len(scores) and any(len(b) == 3 for b in placed)  # (a quarter, halfway, the end)
    for bounds, s in zip(placed, scores):
        assert bounds == sorted(bounds)  # the groups only grow
        for b in bounds:
            assert b <= s * (1 + 1e-12), (b, s)


def test_pruning_never_changes_a_plan_and_does_prune(monkeypatch) -> None:
    """The plans with the prune are the plans without it, on every case; and some candidate is pruned (the
    bench cell n = 2,048, W = 256, seed 0: the second count's groups before the fill already score more)."""
    pruned = 0
    bound = hydra.HyDra._structure_bound
    for n, w, pp, seed in CASES:
        batch, job, cm = _case(n, w, pp, seed)
        monkeypatch.setattr(hydra.HyDra, "_structure_bound", lambda self, *a, **k: -np.inf)
        ref = create_policy("hydra").plan(batch, job, cm)
        monkeypatch.setattr(hydra.HyDra, "_structure_bound", bound)
        calls = []
        orig_place = hydra_placement.place

        def spy(orig_place=orig_place, calls=calls, **kw):
            out = orig_place(**kw)
            calls.append(out is None)
            return out
        monkeypatch.setattr(hydra, "place", spy)
        got = create_policy("hydra").plan(batch, job, cm)
        monkeypatch.setattr(hydra, "place", orig_place)
        assert _groups(got) == _groups(ref), (n, w, pp, seed)
        assert got.meta == ref.meta
        pruned += sum(calls)
    assert pruned >= 1


def test_best_first_drafting_gives_the_plans_of_list_order(monkeypatch) -> None:
    """The choices drafted best first (HyDra._best_draft, policy._draft_order) give the plans of drafting them
    in list order, the plain loop it replaces (each draft bounded by the best so far); at the bench cell
    (2,048 × 256, seed 0) best first drafts a later choice first."""
    reordered = 0
    best_first = hydra._draft_order
    for n, w, pp, seed in CASES:
        batch, job, cm = _case(n, w, pp, seed)
        monkeypatch.setattr(hydra, "_draft_order", lambda choices: list(range(len(choices))))
        ref = create_policy("hydra").plan(batch, job, cm)
        orders: list[list[int]] = []

        def spy(choices, orders=orders):
            orders.append(best_first(choices))
            return orders[-1]
        monkeypatch.setattr(hydra, "_draft_order", spy)
        got = create_policy("hydra").plan(batch, job, cm)
        assert _groups(got) == _groups(ref), (n, w, pp, seed)
        assert got.meta == ref.meta
        reordered += any(o != sorted(o) for o in orders)
        if (n, w, seed) == (2048, 256, 0):
            assert orders[0][0] != 0
    assert reordered >= 2
