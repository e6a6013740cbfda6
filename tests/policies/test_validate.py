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
