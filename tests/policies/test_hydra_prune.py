"""HyDra drafts its microbatch-count candidates best first: every candidate's structure (heavy sequences and
phase A) and its bound (HyDra._structure_bound), then the fills in ascending bound, and a candidate whose bound is
at least the best score so far is never filled: the fill only adds load, so that candidate cannot win. The bound
must never exceed the score of the finished layout, and the cut must never change a plan."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import create_policy
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


def _spied(monkeypatch, cut: bool = True) -> dict:
    """Spies on HyDra's best-first drafting: every structure's bounds (a quarter through phase A, and at its end
    when asked), the structures made and filled, and each filled structure's score. ``cut=False``: every bound
    reads −inf, so every candidate is filled, in list order (the plain loop the cut replaces)."""
    rec: dict = {"bounds": {}, "made": 0, "filled": 0, "layout_of": {}, "score": {}, "alive": []}
    bound, structure, finish, order = (hydra.HyDra._structure_bound, hydra.structure, hydra.finish,
                                       hydra.HyDra._order)

    def spy_bound(self, st, *a):
        rec["alive"].append(st)  # keyed by id(): a freed structure's id could be reused by the next one
        rec["bounds"].setdefault(id(st), []).append(bound(self, st, *a))
        return rec["bounds"][id(st)][-1] if cut else -np.inf

    def spy_structure(**kw):
        rec["made"] += 1
        return structure(**kw)

    def spy_finish(st, *a):
        rec["filled"] += 1
        out = finish(st, *a)
        rec["alive"] += [st, out]
        rec["layout_of"][id(out)] = id(st)
        return out

    def spy_order(self, layout, *a):
        out = order(self, layout, *a)
        if id(layout) in rec["layout_of"]:
            rec["score"][rec["layout_of"][id(layout)]] = out[2]
        return out

    monkeypatch.setattr(hydra.HyDra, "_structure_bound", spy_bound)
    monkeypatch.setattr(hydra, "structure", spy_structure)
    monkeypatch.setattr(hydra, "finish", spy_finish)
    monkeypatch.setattr(hydra.HyDra, "_order", spy_order)
    return rec


@pytest.mark.parametrize("n,w,pp,seed", CASES)
def test_the_bound_never_exceeds_the_finished_layouts_score(n: int, w: int, pp: int, seed: int,
                                                            monkeypatch) -> None:
    """Every candidate's bounds (a quarter through phase A, and at its end) ≤ its score after the fill, with the
    cut switched off so that every candidate is filled; the bounds only grow."""
    batch, job, cm = _case(n, w, pp, seed)
    rec = _spied(monkeypatch, cut=False)
    create_policy("hydra").plan(batch, job, cm)
    assert len(rec["bounds"]) >= 2 and any(len(b) == 2 for b in rec["bounds"].values())
    for st, bounds in rec["bounds"].items():
        assert bounds == sorted(bounds)
        for b in bounds:
            assert b <= rec["score"][st] * (1 + 1e-12), (b, rec["score"][st])


def test_a_five_percent_inflated_bound_fails(monkeypatch) -> None:
    """The check above has teeth: 1.05 × a bound exceeds the finished score at the bench cell."""
    batch, job, cm = _case(2048, 256, 4, 0)
    rec = _spied(monkeypatch, cut=False)
    create_policy("hydra").plan(batch, job, cm)
    assert any(1.05 * b > rec["score"][st] for st, bs in rec["bounds"].items() for b in bs)


def test_the_cut_never_changes_a_plan_and_does_cut(monkeypatch) -> None:
    """The plans with the cut are the plans of filling every candidate in list order, on every case; and
    candidates are cut (the bench cell n = 2,048, W = 256, seed 0: candidates made, one filled — three made when
    the cut landed, two since GEMMs are priced by shape)."""
    cut = 0
    for n, w, pp, seed in CASES:
        batch, job, cm = _case(n, w, pp, seed)
        with pytest.MonkeyPatch.context() as mp:
            _spied(mp, cut=False)
            ref = create_policy("hydra").plan(batch, job, cm)
        with pytest.MonkeyPatch.context() as mp:
            rec = _spied(mp)
            got = create_policy("hydra").plan(batch, job, cm)
        assert _groups(got) == _groups(ref), (n, w, pp, seed)
        assert got.meta == ref.meta
        cut += rec["made"] - rec["filled"]
        if (n, w, pp, seed) == (2048, 256, 4, 0):
            assert rec["made"] >= 2 and rec["filled"] == 1
    assert cut >= 4
