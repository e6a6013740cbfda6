"""HyDra's fast paths give exactly what the reference paths give.

* ``Pricer`` (policies/hydra/work.py) memoises the work model per distinct length × (size, engine) and, once
  narrowed, reads it only at the stages that are the heaviest on a probe subgrid: its prices must equal
  ``sequence_work`` / ``group_overhead`` (every stage, no memo) bit for bit.
* The planner with the fast pricer (memo, narrowed stages) must return the same plan as with a reference
  pricer that prices every request afresh at every stage.
"""

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, JobSpec, get_gpu, get_model
from dcpsim.policies.hydra import HyDra
from dcpsim.policies.hydra import policy as hydra_mod
from dcpsim.policies.hydra.degrees import allowed_degrees
from dcpsim.policies.hydra.pricing import group_overhead, sequence_work
from dcpsim.policies.hydra.work import Pricer, build_grid
from dcpsim.traces import get_preset
from dcpsim.traces.batching import GlobalBatch


def _case(n: int, w: int, pp: int = 4, trace: str = "256k", seed: int = 0, terms: str = "all"):
    lengths = get_preset(trace).sample(n, seed)
    budget = max(int(np.ceil(lengths.sum() / (w * 8))), int(np.ceil(lengths.max() / w)))
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=pp, pool=w,
                  context_len=int(get_preset(trace).context_len), max_tokens_per_rank=budget)
    return GlobalBatch.of(lengths), job, AnalyticCostModel(job, terms=CostTerms.parse(terms))


class _ReferencePricer(Pricer):
    """Every request priced afresh with sequence_work / group_overhead at every stage; no screen."""

    def __init__(self, lengths, cost_model, narrow=True):
        super().__init__(lengths, cost_model, narrow=False)
        self.lengths = np.asarray(lengths, dtype=np.int64)

    def work(self, pos, sizes, ulysses):
        pos = np.asarray(pos, dtype=np.int64)
        n = len(pos)
        return sequence_work(self.lengths[pos], np.broadcast_to(sizes, (n,)), np.broadcast_to(ulysses, (n,)),
                             self.cost_model)

    def overhead(self, sizes, ulysses):
        s, u = np.broadcast_arrays(np.asarray(sizes), np.asarray(ulysses))
        return group_overhead(s.ravel(), u.ravel(), self.cost_model)


def _signature(plan):
    return [[(g.ranks, g.seq_ids, g.engine) for g in mb.groups] for mb in plan.microbatches]


def test_pricer_equals_sequence_work_bit_for_bit_after_narrowing():
    batch, job, cm = _case(600, 64)
    lengths = np.asarray(batch.lengths)
    pricer = Pricer(lengths, cm)
    D = allowed_degrees(64, "pow2", 1, "auto", job)
    build_grid(lengths, D, "auto", job, cm, job.max_tokens_per_rank, pricer=pricer)
    # the LM head and loss make the last of the 4 stages the heaviest everywhere: one stage is priced
    assert pricer.stages == (3,)
    rng = np.random.default_rng(1)
    pos = rng.integers(0, len(lengths), 500)
    sizes = rng.choice([1, 2, 4, 8, 16, 64], 500)
    uly = np.minimum(sizes, rng.choice([1, 2, 4, 8], 500))
    for _ in range(2):  # the second round is answered from the memo
        got = pricer.work(pos, sizes, uly)
        want = sequence_work(lengths[pos], sizes, uly, cm)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(pricer.overhead(sizes, uly), group_overhead(sizes, uly, cm))


def test_pricer_keeps_every_stage_when_none_dominates():
    # without the LM head and the embedding every stage costs the same: argmax is stage 0 everywhere, and
    # pricing stage 0 alone is still exact
    batch, job, cm = _case(300, 16, terms="legacy")
    lengths = np.asarray(batch.lengths)
    pricer = Pricer(lengths, cm)
    build_grid(lengths, allowed_degrees(16, "pow2", 1, "auto", job), "auto", job, cm,
               job.max_tokens_per_rank, pricer=pricer)
    assert pricer.stages == (0,)
    pos = np.arange(len(lengths))
    np.testing.assert_array_equal(pricer.work(pos, 4, 2), sequence_work(lengths, np.full(300, 4),
                                                                         np.full(300, 2), cm))


@pytest.mark.parametrize("n,w,trace,opts", [
    (512, 64, "256k", {}),
    (2048, 256, "256k", {}),
    (1500, 48, "256k", {"degrees": "any"}),
    (1000, 128, "32k", {"cp_engine": "ring"}),
    (800, 32, "32k", {"cp_engine": "hybrid", "tolerance": 0.0}),
])
def test_fast_plan_equals_reference_plan(monkeypatch, n, w, trace, opts):
    batch, job, cm = _case(n, w, trace=trace, seed=2)
    policy = HyDra(**opts)
    fast = policy.plan(batch, job, cm)
    monkeypatch.setattr(hydra_mod, "Pricer", _ReferencePricer)
    ref = policy.plan(batch, job, cm)
    assert _signature(fast) == _signature(ref)
    assert fast.meta["target_s"] == ref.meta["target_s"]
