import pytest

from dcpsim.policies import CPGroup, Engine, Plan, PlanError, make_plan, validate_plan
from dcpsim.traces.batching import GlobalBatch

B = GlobalBatch.of([100, 200, 300, 400])


def ring(ranks, ids):
    return CPGroup(tuple(ranks), tuple(ids), Engine.for_size("ring", len(ranks)))


def test_valid_plan_passes():
    plan = make_plan("t", 4, [[ring([0, 1], [0, 1]), ring([2], [2]), ring([3], [3])]])
    validate_plan(plan, B, max_tokens_per_rank=400)


@pytest.mark.parametrize("groups,match", [
    ([[ring([0, 1], [0, 1, 2])]], "missing from the plan"),
    ([[ring([0], [0, 1]), ring([1], [1, 2, 3])]], "sequence id 1 is duplicated"),
    ([[ring([0, 1, 2, 3], [0, 1, 2, 3])], [ring([1], [3])]], "sequence id 3 is duplicated"),
    ([[ring([0, 1], [0, 1]), ring([1, 2], [2, 3])]], "rank 1 is already in another group"),
    ([[ring([0, 4], [0, 1, 2, 3])]], "rank 4 is outside the pool"),
    ([[ring([0], [0, 1, 2, 9])]], "sequence id 9 is not in the batch"),
    ([[ring([0, 1], [0, 1, 2, 3])]], "over the memory budget"),
    ([[CPGroup((0, 1, 2), (0, 1, 2, 3), Engine("hybrid", 2, 2))]], "engine hybrid\\(2,2\\) has size 4"),
    ([[CPGroup((0, 1, 2, 3), (0, 1, 2, 3), Engine("ulysses", 4, 1))]], "Ulysses degree 4 does not divide"),
])
def test_invalid_plans_are_rejected_with_a_reason(groups, match):
    plan = make_plan("t", 4, groups)
    with pytest.raises(PlanError, match=match):
        validate_plan(plan, B, max_tokens_per_rank=400, kv_heads_per_rank=2)


def test_non_contiguous_groups_are_valid_and_the_runtime_names_what_it_cannot_run():
    """A group may list any ranks (the cost model prices the nodes they span: tests/cost_models/
    test_topology.py); real_runtime's group pool refuses, with the reason, an inner Ulysses group listed out
    of order (torch orders a process group's all-to-all by global rank)."""
    from dcpsim.real_runtime.group_pool import GroupKey, GroupPoolError

    batch = GlobalBatch.of([100, 200])
    ok = make_plan("t", 4, [[ring([0, 2], [0]), CPGroup((1, 3), (1,), Engine("ulysses", 2, 1))]])
    validate_plan(ok, batch, kv_heads_per_rank=2)
    out_of_order = CPGroup((0, 2, 3, 1), (0, 1), Engine("hybrid", 2, 2))
    validate_plan(make_plan("t", 4, [[out_of_order]]), batch, kv_heads_per_rank=2)
    with pytest.raises(GroupPoolError, match=r"inner group \(3, 1\) must list its ranks in ascending order"):
        GroupKey.of(out_of_order)


def test_plan_json_round_trip():
    plan = make_plan("t", 8, [[ring([0, 1, 2, 3], [0]), CPGroup((4, 5, 6, 7), (1, 2), Engine("hybrid", 2, 2))],
                              [ring([0], [3])]], budget=7)
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.meta == {"budget": 7}
    assert again.degrees() == {0: 4, 1: 4, 2: 4, 3: 1}


def test_malformed_plan_json():
    with pytest.raises(PlanError, match="malformed plan JSON"):
        Plan.from_dict({"policy": "x", "pool_size": 2})
    with pytest.raises(PlanError, match="engine kind 'star' is unknown"):
        Engine.parse("star", 2)


def test_the_plans_pool_must_be_the_jobs():
    """A 32-rank plan for a 16-rank job would be priced on 16 GPUs that do not exist (the issue's plan
    simulated below the proved lower bound); a plan over fewer ranks leaves paid-for ranks idle. Both are
    refused."""
    batch = GlobalBatch.of([100, 200])
    wide = make_plan("t", 32, [[ring(range(16), [0]), ring(range(16, 32), [1])]])
    validate_plan(wide, batch)  # without the job's pool, nothing to compare against
    validate_plan(wide, batch, pool_size=32)
    with pytest.raises(PlanError, match="the plan is for a pool of 32 ranks but the job has 16") as info:
        validate_plan(wide, batch, pool_size=16)
    assert "\n" not in str(info.value)
    with pytest.raises(PlanError, match="pool of 4 ranks but the job has 16"):
        validate_plan(make_plan("t", 4, [[ring([0, 1, 2, 3], [0, 1])]]), batch, pool_size=16)


@pytest.mark.parametrize("extra", [[], [ring([0, 1], [])], [ring([0], []), ring([1], [])]],
                         ids=["no-groups", "one-empty-group", "two-empty-groups"])
def test_an_empty_microbatch_is_refused(extra):
    plan = make_plan("t", 4, [[ring([0, 1], [0, 1]), ring([2], [2]), ring([3], [3])], extra])
    with pytest.raises(PlanError, match="microbatch 1 holds no sequence"):
        validate_plan(plan, B)


def test_an_empty_group_beside_a_full_one_is_still_valid():
    plan = make_plan("t", 4, [[ring([0, 1], [0, 1, 2, 3]), ring([2, 3], [])]])
    validate_plan(plan, B)


@pytest.mark.parametrize("pool", [8, 12])
def test_no_shipped_policy_plans_another_pool_or_an_empty_microbatch(pool):
    """Every shipped policy, on batches of a shipped preset, plans over exactly the job's pool and leaves no
    microbatch empty (the two checks above never refuse a shipped policy's plan)."""
    from dcpsim.cost_models import AnalyticCostModel
    from dcpsim.policies import available_policies, create_policy
    from dcpsim.policies.registry import _REGISTRY
    from dcpsim.traces import sample_batches
    from tests.conftest import small_job

    job = small_job(pool=pool, pp=2)
    cm = AnalyticCostModel(job)
    batches = sample_batches("32k", iterations=2, global_batch_tokens=pool * 16384, context_len=32768, seed=3)
    shipped = [n for n in available_policies() if _REGISTRY[n].__module__.startswith("dcpsim.policies.")]
    assert len(shipped) >= 8
    for name in shipped:
        for batch in batches:
            plan = create_policy(name).plan(batch, job, cm)
            budget = cm.max_tokens_per_rank() if plan.meta.get("memory_checked", True) else None
            validate_plan(plan, batch, max_tokens_per_rank=budget, kv_heads_per_rank=job.kv_heads_per_rank,
                          heads_per_rank=job.heads_per_rank, pool_size=job.pool)
