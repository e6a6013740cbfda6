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


@pytest.mark.parametrize("n,w,pp,seed", CASES)
def test_the_bound_never_exceeds_the_finished_layouts_score(n: int, w: int, pp: int, seed: int,
                                                            monkeypatch) -> None:
    """Every candidate's bound (after phase A) ≤ its score (after the fill), with the cut switched off so that
    every candidate is filled (in list order: every bound −inf); passes with a single candidate compute none."""
    batch, job, cm = _case(n, w, pp, seed)
    bounds: list[float] = []
    scores: list[float] = []
    pairs: list[tuple[float, float]] = []
    bound, finish, best = hydra.HyDra._structure_bound, hydra.HyDra._finish, hydra.HyDra._best_draft

    def spy_bound(self, *a, **k):
        bounds.append(bound(self, *a, **k))
        return -np.inf  # never cut: fill every candidate

    def spy_finish(self, *a, **k):
        out = finish(self, *a, **k)
        scores.append(out.score)
        return out

    def spy_best(self, *a, **k):
        bounds.clear()
        scores.clear()
        out = best(self, *a, **k)
        if bounds:
            assert len(bounds) == len(scores)
            pairs.extend(zip(bounds, scores))
        return out

    monkeypatch.setattr(hydra.HyDra, "_structure_bound", spy_bound)
    monkeypatch.setattr(hydra.HyDra, "_finish", spy_finish)
    monkeypatch.setattr(hydra.HyDra, "_best_draft", spy_best)
    create_policy("hydra").plan(batch, job, cm)
    assert len(pairs) >= 2
    for b, s in pairs:
        assert b <= s * (1 + 1e-12), (b, s)


def test_a_five_percent_inflated_bound_fails() -> None:
    """The check above has teeth: 1.05 × the bound exceeds the finished score at the bench cell (one pass of
    three candidates: W = 256 plans pow2 alone)."""
    batch, job, cm = _case(2048, 256, 4, 0)
    bounds: list[float] = []
    scores: list[float] = []
    bound, finish = hydra.HyDra._structure_bound, hydra.HyDra._finish
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hydra.HyDra, "_structure_bound", lambda self, *a, **k: bounds.append(bound(self, *a, **k))
                   or -np.inf)

        def spy_finish(self, *a, **k):
            out = finish(self, *a, **k)
            scores.append(out.score)
            return out
        mp.setattr(hydra.HyDra, "_finish", spy_finish)
        create_policy("hydra").plan(batch, job, cm)
    assert len(bounds) == len(scores) == 3
    assert any(1.05 * b > s for b, s in zip(bounds, scores))


def test_the_cut_never_changes_a_plan_and_does_cut(monkeypatch) -> None:
    """The plans with the cut are the plans of filling every candidate in list order (the plain loop it
    replaces), on every case; and candidates are cut (the bench cell n = 2,048, W = 256, seed 0: two of three)."""
    cut = 0
    bound, finish = hydra.HyDra._structure_bound, hydra.HyDra._finish
    for n, w, pp, seed in CASES:
        batch, job, cm = _case(n, w, pp, seed)
        monkeypatch.setattr(hydra.HyDra, "_structure_bound", lambda self, *a, **k: -np.inf)
        ref = create_policy("hydra").plan(batch, job, cm)
        monkeypatch.setattr(hydra.HyDra, "_structure_bound", bound)
        calls = {"bound": 0, "fill": 0}

        def spy_bound(self, *a, calls=calls, **k):
            calls["bound"] += 1
            return bound(self, *a, **k)

        def spy_finish(self, *a, calls=calls, **k):
            calls["fill"] += 1
            return finish(self, *a, **k)
        monkeypatch.setattr(hydra.HyDra, "_structure_bound", spy_bound)
        monkeypatch.setattr(hydra.HyDra, "_finish", spy_finish)
        got = create_policy("hydra").plan(batch, job, cm)
        monkeypatch.setattr(hydra.HyDra, "_finish", finish)
        assert _groups(got) == _groups(ref), (n, w, pp, seed)
        assert got.meta == ref.meta
        cut += calls["bound"] - calls["fill"]
        if (n, w, pp, seed) == (2048, 256, 4, 0):
            assert (calls["bound"], calls["fill"]) == (3, 1)
    assert cut >= 4
