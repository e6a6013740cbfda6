"""HyDra's fill (policies/hydra_fill.py) places with one global heap over every class until a sequence needs
more (a class ruled out for it, the roomiest bin of all too small, a new microbatch), then hands over to the
class heaps. The plans must be those of the class loop alone (``global_first=False``), bit for bit, on batches
where the hand-over comes at the first sequence, midway, or never."""

from __future__ import annotations

import numpy as np
import pytest

import dcpsim.policies.hydra.placement as placement
from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import create_policy
from dcpsim.policies.hydra.fill import fill
from dcpsim.traces.batching import GlobalBatch

# (pool, pp, budget, n, seed): heavy-tailed batches whose fills hand over at the first sequence, midway, or
# never (checked below)
CASES = [(16, 4, 8192, 300, 1), (24, 2, 4096, 300, 2), (48, 4, 16384, 300, 3), (40, 8, 2048, 300, 4),
         (12, 1, 32768, 200, 5), (64, 4, 8192, 600, 6), (8, 4, 65536, 400, 7), (32, 4, 4096, 800, 8)]


def _plan(case, monkeypatch: pytest.MonkeyPatch, **fill_options) -> tuple[str, list[tuple[int, int]]]:
    pool, pp, budget, n, seed = case
    rng = np.random.default_rng(seed)
    lengths = np.minimum(pool * budget, np.maximum(1, rng.lognormal(8.0, 1.6, n))).astype(np.int64)
    job = JobSpec(get_model("llama3-8b"), get_gpu("h200"), pp=pp, pool=pool, max_tokens_per_rank=budget)
    handovers: list[tuple[int, int]] = []  # (sequences placed globally, fill sequences) per fill

    def traced(pk, small, *args, **kwargs):
        out = fill(pk, small, *args, **kwargs, **fill_options)
        handovers.append((out.n_global, len(small)))
        return out

    monkeypatch.setattr(placement, "fill_phase", traced)
    plan = create_policy("hydra").plan(GlobalBatch.of(lengths), job, AnalyticCostModel(job))
    return plan.to_json(), handovers


def test_global_heap_then_class_heaps_equals_the_class_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = set()
    for case in CASES:
        fast, handovers = _plan(case, monkeypatch)
        reference, ref_handovers = _plan(case, monkeypatch, global_first=False)
        assert fast == reference, case
        assert all(g == 0 for g, _ in ref_handovers)  # the reference never uses the global heap
        kinds |= {"first" if g == 0 else "never" if g == n else "midway" for g, n in handovers if n}
    assert kinds == {"first", "midway", "never"}  # every kind of hand-over was exercised
