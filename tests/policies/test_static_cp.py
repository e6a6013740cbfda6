import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel
from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.policies import PolicyError, create_policy, validate_plan
from dcpsim.policies.static_cp import pack_first_fit
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job


def test_first_fit_in_data_order():
    bins = pack_first_fit(np.array([6, 5, 4, 3, 2]), 10)
    assert bins == [[0, 2], [1, 3, 4]]


def test_windows_dealt_round_robin_to_replicas():
    job = small_job(pool=8, context_len=1000, max_tokens_per_rank=500)
    cm = ConstantCostModel(job)
    batch = GlobalBatch.of([600, 600, 600, 600, 600, 400])
    plan = create_policy("static-cp").plan(batch, job, cm)
    assert plan.meta["cp_degree"] == 2
    # windows: [600,400], [600], [600], [600], [600] → 5 windows over 4 replicas → 2 microbatches
    assert plan.num_microbatches == 2
    assert [g.ranks for g in plan.microbatches[1].groups] == [(0, 1)]
    assert plan.microbatches[0].groups[0].seq_ids == (0, 5)
    validate_plan(plan, batch, max_tokens_per_rank=500)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4096), min_size=1, max_size=60), st.sampled_from([1, 2, 4, 6, 8, 12]),
       st.sampled_from(["ring", "hybrid", "auto"]))
def test_static_plans_are_valid(lengths, pool, engine):
    job = small_job(pool=pool, context_len=4096, max_tokens_per_rank=2048)
    cm = AnalyticCostModel(job)
    batch = GlobalBatch.of(lengths)
    try:
        plan = create_policy("static-cp", cp_engine=engine).plan(batch, job, cm)
    except InfeasibleError:
        assert pool == 1  # 4096 tokens need 2 ranks of 2048
        return
    validate_plan(plan, batch, max_tokens_per_rank=2048, kv_heads_per_rank=job.kv_heads_per_rank,
                  heads_per_rank=job.heads_per_rank)
    assert set(plan.degrees().values()) == {plan.meta["cp_degree"]}


def test_bad_options():
    job = small_job(pool=8)
    cm = ConstantCostModel(job)
    with pytest.raises(PolicyError, match="cp_degree = 3 must divide the pool size 8"):
        create_policy("static-cp", cp_degree=3).plan(GlobalBatch.of([10]), job, cm)
    with pytest.raises(PolicyError, match="no option 'degree'"):
        create_policy("static-cp", degree=2)
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        create_policy("nope")
    with pytest.raises(InfeasibleError, match="does not fit even on the whole pool"):
        tight = small_job(pool=2, max_tokens_per_rank=100)
        create_policy("static-cp").plan(GlobalBatch.of([10]), tight, ConstantCostModel(tight))
