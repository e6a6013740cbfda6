"""The bound at V > 1 (interleaved 1F1B): fill and drain pass chunk 0 of the stages before, 1/V of their compute
(docs/bound.md, "Interleaved 1F1B"), and the bound stays below every simulated iteration."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel
from dcpsim.sim.bound import iteration_bound
from dcpsim.sim.simulate import simulate_plan
from tests.conftest import small_job
from tests.sim.test_engine import uniform_plan
from tests.sim.test_interleaved import random_plan


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("vpp", [2, 4])
def test_bound_stays_below_random_interleaved_plans(seed, vpp):
    rng = np.random.default_rng(seed)
    plan, batch = random_plan(rng, 4, 4 * int(rng.integers(1, 4)))
    for cm in (AnalyticCostModel(small_job(pp=4, pool=4, vpp=vpp)), ConstantCostModel(small_job(pp=4, pool=4,
                                                                                                vpp=vpp))):
        m = simulate_plan(plan, batch, cm).metrics
        assert 0 < m.bound_s <= m.iteration_time_s * (1 + 1e-9)


def test_work_term_charges_the_interleaved_fill_and_drain():
    """The work term falls with V by (1 − 1/V) of the stages' fill and drain compute and stays above the chain
    and the sync (it is what the bound reports for many uniform microbatches), and is unchanged at V = 1."""
    plan, batch = uniform_plan(4, 16)
    lengths = np.asarray(batch.lengths)
    bounds = {v: iteration_bound(lengths, AnalyticCostModel(small_job(pp=4, pool=4, vpp=v)), max_tokens_per_rank=None)
              for v in (1, 2, 4)}
    assert bounds[1].work_s > bounds[2].work_s > bounds[4].work_s > max(bounds[4].chain_s, bounds[4].sync_s)
    assert {b.work_stage for b in bounds.values()} == {3}  # the last stage: three stages of fill and drain
    fill_drain_1 = bounds[1].work_s - bounds[4].work_s
    assert bounds[1].work_s - bounds[2].work_s == pytest.approx(fill_drain_1 * (1 - 1 / 2) / (1 - 1 / 4), rel=1e-9)
    for v in (2, 4):
        m = simulate_plan(plan, batch, AnalyticCostModel(small_job(pp=4, pool=4, vpp=v))).metrics
        b = iteration_bound(lengths, AnalyticCostModel(small_job(pp=4, pool=4, vpp=v)))  # the budget the plan honours
        assert m.bound_s == b.bound_s == b.work_s > max(b.chain_s, b.sync_s)
        assert m.bound_s <= m.iteration_time_s * (1 + 1e-9)
