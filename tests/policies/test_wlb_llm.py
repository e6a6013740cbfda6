"""wlb-llm: hand-checked packing (work l² + l, LPT, outliers spread over microbatches and replicas) and a
property test: every plan is valid under the cost model's budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models.flops import attention_fwd_flops, linear_fwd_flops_per_token
from dcpsim.policies import PolicyError, create_policy, validate_plan
from dcpsim.policies.wlb_llm import document_work, pack_by_work
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job


def test_work_is_attention_plus_linear_flops() -> None:
    job = small_job()
    m = job.model
    # causal forward attention 2·L²·d·a FLOPs (docs/cost_model.md) + linear FLOPs per token · L
    L = 4096
    want = 2 * L * L * m.head_dim * m.heads + L * linear_fwd_flops_per_token(m)
    assert document_work(np.array([L]), job)[0] == pytest.approx(want, rel=1e-12)
    assert attention_fwd_flops(np.array([float(L)]), m)[0] == pytest.approx(2 * L * L * m.head_dim * m.heads)


def test_lpt_by_work_hand_example() -> None:
    # works 9, 7, 5, 4, 3, 2 into 2 microbatches × 1 replica, no outliers (factor 10), room for all:
    # LPT: 9→b0, 7→b1, 5→b1 (12), 4→b0 (13), 3→b1 (15), 2→b0 (15).
    bins = pack_by_work(np.array([9.0, 7, 5, 4, 3, 2]), np.ones(6), 1, 2, 100.0, 10.0)
    assert bins == [[0, 3, 5], [1, 2, 4]]
    # Token room binds: capacity 2 tokens per bin, 3 documents of 1 token each cannot fit 1 bin of 2 per mb.
    assert pack_by_work(np.ones(3), np.ones(3), 1, 1, 2.0, 10.0) is None


def test_outliers_spread_over_microbatches_and_replicas() -> None:
    # 4 outliers of work 100, 12 documents of work 1; 2 microbatches × 2 replicas; target = 412/4 = 103:
    # factor 0.5 marks the 4 heavy ones. They go one per (microbatch, replica): mb 0 → replica 0, mb 1 →
    # replica 1 (bins tie, replica 1 has less work), mb 0 → replica 1 (the empty bin), mb 1 → replica 0.
    work = np.array([100.0] * 4 + [1.0] * 12)
    bins = pack_by_work(work, np.ones(16), 2, 2, 100.0, 0.5)
    heavy = [sorted(i for i in b if i < 4) for b in bins]
    assert heavy == [[0], [2], [3], [1]]


def test_plan_uses_one_degree_and_balances_better_than_windows() -> None:
    job = small_job(pool=8, pp=2, context_len=8192, max_tokens_per_rank=4096)
    cm = AnalyticCostModel(job)
    rng = np.random.default_rng(3)
    L = np.minimum(8192, (rng.pareto(1.2, 200) * 800 + 50).astype(np.int64))
    batch = GlobalBatch.of(L)
    plan = create_policy("wlb-llm").plan(batch, job, cm)
    validate_plan(plan, batch, max_tokens_per_rank=cm.max_tokens_per_rank())
    assert {g.size for mb in plan.microbatches for g in mb.groups} == {2}
    w = document_work(L, job)
    loads = [w[np.searchsorted(batch.seq_ids, g.seq_ids)].sum() for mb in plan.microbatches for g in mb.groups]
    assert max(loads) / min(loads) < 1.5


def test_bad_input() -> None:
    job = small_job(pool=4, max_tokens_per_rank=100, context_len=200)
    with pytest.raises(PolicyError, match="sequence id 1 has 900 tokens, over cp_degree × budget = 2 × 100"):
        create_policy("wlb-llm").plan(GlobalBatch.of([10, 900]), job, ConstantCostModel(job))
    with pytest.raises(PolicyError, match="outlier_factor"):
        create_policy("wlb-llm", outlier_factor=0.0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool=st.integers(1, 24), pp=st.sampled_from([1, 2]), budget=st.integers(256, 8192),
       n=st.integers(1, 80), seed=st.integers(0, 2**31 - 1), factor=st.sampled_from([0.5, 1.0, 2.0, 50.0]),
       mbs=st.one_of(st.none(), st.integers(1, 12)))
def test_plans_are_valid(pool, pp, budget, n, seed, factor, mbs) -> None:
    job = JobSpec(get_model("tiny"), get_gpu("h100"), pp=pp, pool=pool, max_tokens_per_rank=budget,
                  context_len=budget)
    cm = ConstantCostModel(job)
    rng = np.random.default_rng(seed)
    L = np.maximum(1, np.round(np.power(float(budget), rng.random(n)))).astype(np.int64)
    batch = GlobalBatch.of(L, ids=rng.permutation(3 * n)[:n] + 5)
    plan = create_policy("wlb-llm", outlier_factor=factor, num_microbatches=mbs).plan(batch, job, cm)
    validate_plan(plan, batch, max_tokens_per_rank=budget, kv_heads_per_rank=job.kv_heads_per_rank,
                  heads_per_rank=job.heads_per_rank)
