"""The lower bound on the shipped MoE scenario (experiments/scenarios/h100-qwen3-moe-ep8-128k.toml): with the
expert all-to-alls' floor (assumption E, sim.bound.ep_floor) it stays below every random valid plan's simulated
iteration and is strictly tighter than without it (the bound before the floor: Pricing.ep_floor = 0)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost_models import moe
from dcpsim.cost_models.analytic_pricing import AnalyticPricing
from dcpsim.experiments.scenario.files import load_scenario
from dcpsim.policies import validate_plan
from dcpsim.sim.bound import iteration_bound
from dcpsim.traces.batching import GlobalBatch
from tests.sim.test_bound_properties import REL, iteration_time, random_plan

SCENARIO = "h100-qwen3-moe-ep8-128k"


def _batch(sc, n: int):
    """The first ``n`` documents of the scenario's first batch (a whole 4M-token batch is slow to simulate)."""
    L = np.asarray(sc.batches()[0].lengths, dtype=np.int64)[:n]
    return L, np.arange(len(L), dtype=np.int64)


@pytest.mark.parametrize("changes", [{}, {"moe_dispatcher": "flex"}, {"ep": 16}, {"ep": 4, "etp": 2}])
def test_moe_bound_below_random_plans_and_tighter(changes, monkeypatch) -> None:
    sc = replace(load_scenario(SCENARIO), **changes)
    cm = sc.cost_model()
    job = cm.job
    L, ids = _batch(sc, 48)
    batch = GlobalBatch.of(L, ids=ids)
    budget = cm.max_tokens_per_rank()
    with_floor = iteration_bound(L, cm)
    with monkeypatch.context() as mp:  # the bound as it was: EP communication only as ≥ 0
        mp.setattr(AnalyticPricing, "ep_floor", lambda self, tpr, stage: (0.0, 0.0))
        before = iteration_bound(L, cm)
    assert with_floor.bound_s > before.bound_s * (1 + 1e-6)
    # the floor the bound adds is the closed form α + β·tpr per rank, positive for EP > 1
    a, b = moe.ep_comm_floor(job, cm.cal, 0, cm._p2p_bytes_scale(), by_destination=True)
    assert a > 0 and b > 0
    rng = np.random.default_rng(7)
    for _ in range(4):
        plan = random_plan(rng, L, ids, job, budget)
        validate_plan(plan, batch, max_tokens_per_rank=budget, kv_heads_per_rank=job.kv_heads_per_rank,
                      heads_per_rank=job.heads_per_rank)
        assert iteration_time(plan, batch, cm) >= with_floor.bound_s * (1 - REL)
