"""sim/bound prices through the declared pricing (cost_models.base.Pricing) and gives the bounds it gave
before, when it read the concrete AnalyticCostModel (golden numbers printed by iteration_bound at commit 86309e6,
for the same batch); a cost model with only the CostModel protocol gets the default pricing's classes, no
Ulysses floor, and the same bound whether or not it declares that default."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, CostTerms, JobSpec, get_gpu, get_model
from dcpsim.cost_models.pricing import GroupCostsPricing
from dcpsim.sim.bound import iteration_bound, stage_classes, ulysses_floor
from tests.cost_models._cases import calibration_before


def _job(model="llama3-8b", gpu="h200", tp=1, pp=4, pool=64, mtr=16384):
    return JobSpec(model=get_model(model), gpu=get_gpu(gpu), tp=tp, pp=pp, pool=pool, context_len=262144,
                   max_tokens_per_rank=mtr)


LENGTHS = np.random.default_rng(3).integers(64, 200_000, 300)
# (bound_s, work_s, chain_s) at commit 86309e6
GOLDEN = {
    "dense": (31.281642128043003, 31.281642128043003, 1.1420542293964986),
    "dense-legacy": (30.170680845850406, 30.170680845850406, 1.3164080495880082),
    "dense-nolmhead": (28.764002140331197, 28.764002140331197, 1.1248812549479141),
    "tp2-pool12": (84.44578092596957, 84.44578092596957, 2.905077466180982),
    "moe": (40.0855163221817, 40.0855163221817, 2.2257370051131935),
    "constant": (1.3935347812499999, 1.3935347812499999, 0.0365855625),
}
# the terms and calibrations the goldens were printed with (before GEMMs by shape and the end-to-end fits)
BEFORE = CostTerms.parse("all,-kernels,-grad_dtype,-gemm_shapes")
H200, H100 = calibration_before("h200"), calibration_before("h100")
MODELS = {
    "dense": lambda: AnalyticCostModel(_job(), H200, terms=BEFORE),
    "dense-legacy": lambda: AnalyticCostModel(_job(), H200, terms=CostTerms.parse("legacy")),
    "dense-nolmhead": lambda: AnalyticCostModel(_job(), H200,
                                                terms=CostTerms.parse("all,-lm_head,-kernels,-grad_dtype,-gemm_shapes")),
    "tp2-pool12": lambda: AnalyticCostModel(_job(tp=2, pool=12, mtr=65536), H200, terms=BEFORE),
    "moe": lambda: AnalyticCostModel(_job("qwen3-30b-a3b", "h100"), H100, terms=BEFORE),
    "constant": lambda: ConstantCostModel(_job()),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_bound_through_the_pricing_is_the_bound_of_before(name):
    b = iteration_bound(LENGTHS, MODELS[name]())
    assert (b.bound_s, b.work_s, b.chain_s) == GOLDEN[name]


@dataclass(frozen=True)
class _Declared(ConstantCostModel):
    def pricing(self):
        return GroupCostsPricing(self)


def test_a_cost_model_without_a_pricing_of_its_own_gets_the_default():
    cm = ConstantCostModel(_job())
    assert stage_classes(cm, 4) == [0, 1, 2, 3] and ulysses_floor(cm, np.ones(3), np.array([1, 2, 8])) == 0.0
    assert iteration_bound(LENGTHS, _Declared(_job())) == iteration_bound(LENGTHS, cm)


def test_the_analytic_floor_and_classes_come_from_its_pricing():
    cm = AnalyticCostModel(_job())
    assert stage_classes(cm, 4) == [0, 1, 1, 3] and stage_classes(cm, 2) == [0, 1]  # (2: not the job's count)
    floor = ulysses_floor(cm, np.array([0.0, 1000.0, 1000.0]), np.array([4, 1, 4]))
    assert floor[0] > 0 and floor[1] == 0 and floor[2] > floor[0]
    np.testing.assert_array_equal(floor, cm.pricing().ulysses_floor(np.array([0.0, 1000.0, 1000.0]),
                                                                    np.array([4, 1, 4])))
