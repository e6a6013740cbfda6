"""The process-group pool: which groups it creates (each rank set once, in a fixed order), and that the
communicator it returns for a (ranks, engine) really connects those ranks (4 gloo processes, one spawn)."""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dcpsim.policies import CPGroup, Engine, make_plan
from dcpsim.real_runtime.group_pool import (
    GroupKey,
    GroupPool,
    GroupPoolError,
    aligned_keys,
    keys_for_plans,
    process_group_sets,
)

E = Engine.for_size
PLANS = (
    make_plan("a", 4, [[CPGroup((0, 1), (1,), E("ring", 2)), CPGroup((2, 3), (2,), E("ulysses", 2))],
                       [CPGroup((0, 1, 2, 3), (3,), E("hybrid", 4, 2))]]),
    make_plan("b", 4, [[CPGroup((0,), (4,), E("ring", 1)), CPGroup((1, 2), (5,), E("ring", 2)),
                        CPGroup((3,), (6,), E("ring", 1))],
                       [CPGroup((0, 1), (7,), E("ring", 2)), CPGroup((2, 3), (8,), E("ring", 2))]]),
)


def fake_pool(rank: int, keys=None):
    calls = []

    def new_group(ranks):
        calls.append(tuple(ranks))
        return f"pg{tuple(ranks)}"

    keys = keys_for_plans(PLANS) if keys is None else keys
    return GroupPool.create(keys, world=4, rank=rank, new_group=new_group), calls


def test_keys_of_plans_are_distinct_and_sorted():
    keys = keys_for_plans(PLANS)
    assert keys == sorted({GroupKey((0, 1), 1), GroupKey((2, 3), 2), GroupKey((0, 1, 2, 3), 2),
                           GroupKey((1, 2), 1), GroupKey((2, 3), 1)})


def test_each_rank_set_is_created_once_in_size_then_rank_order():
    pool, calls = fake_pool(0)
    assert calls == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3), (0, 1, 2, 3)]
    assert list(pool.created) == calls
    _, calls3 = fake_pool(3)
    assert calls3 == calls  # the same collective sequence on every process


def test_lookup_returns_the_right_subgroups():
    pool, _ = fake_pool(2)
    c = pool.comm((0, 1, 2, 3), Engine.for_size("hybrid", 4, 2))
    assert (c.rank, c.ulysses, c.ring) == (2, 2, 2)
    assert c.group == "pg(0, 1, 2, 3)" and c.ulysses_group == "pg(2, 3)" and c.ring_group == "pg(0, 2)"
    u = pool.comm_for(PLANS[0].microbatches[0].groups[1])
    assert u.ulysses_group == "pg(2, 3)" and u.ring_group is None and u.rank == 0
    r = pool.comm((1, 2), Engine.for_size("ring", 2))
    assert r.ring_group == "pg(1, 2)" and r.ulysses_group is None and r.rank == 1
    single = pool.comm((2,), Engine.for_size("ring", 1))
    assert single.size == 1 and single.ranks == (2,)


def test_missing_group_and_non_member_are_errors():
    pool, _ = fake_pool(0)
    with pytest.raises(GroupPoolError, match="not created at start-up"):
        pool.comm((0, 1, 2, 3), Engine.for_size("ring", 4))
    with pytest.raises(GroupPoolError, match="not a member"):
        pool.comm((2, 3), Engine.for_size("ring", 2))
    with pytest.raises(GroupPoolError, match="ascending"):
        GroupKey((1, 0), 2)
    with pytest.raises(GroupPoolError, match="world has 4"):
        fake_pool(0, [GroupKey((3, 4), 1)])


def test_aligned_keys_cover_every_power_of_two_block():
    keys = aligned_keys(8, ulysses_degrees=(2,))
    blocks = sorted({k.ranks for k in keys})
    assert blocks == sorted([(0, 1), (2, 3), (4, 5), (6, 7), (0, 1, 2, 3), (4, 5, 6, 7), tuple(range(8))])
    assert GroupKey((4, 5, 6, 7), 2) in keys and GroupKey((4, 5), 1) in keys
    assert len(process_group_sets(aligned_keys(6))) == 4  # pairs and one block of 4 (no block of 8)


# ---- 4 processes --------------------------------------------------------------------------------------------
def _worker(rank: int, world: int, out_dir: str) -> None:
    import torch.distributed as dist

    calls = []

    def counting_new_group(ranks):
        calls.append(list(ranks))
        return dist.new_group(ranks)

    pool = GroupPool.for_plans(PLANS, world=world, rank=rank, new_group=counting_new_group)
    checks = {}
    for plan in PLANS:  # every group of every microbatch, as the runner looks them up
        for k, mb in enumerate(plan.microbatches):
            for g in mb.groups:
                if rank not in g.ranks or g.size == 1:
                    continue
                comm = pool.comm_for(g)
                got = {}
                for name, pg, _members in (("group", comm.group, g.ranks),
                                          ("ulysses", comm.ulysses_group, None), ("ring", comm.ring_group, None)):
                    if pg is None:
                        continue
                    t = torch.tensor([float(rank), 1.0])
                    dist.all_reduce(t, group=pg)
                    got[name] = [float(t[0]), int(t[1])]
                checks[f"{plan.policy}/{k}/{g.ranks}"] = got
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"calls": calls, "checks": checks}))


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    from dcpsim.real_runtime.launch import spawn

    out = tmp_path_factory.mktemp("pool")
    spawn(_worker, 4, (str(out),), backend="gloo", timeout_s=120)
    return {r: json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(4)}


def test_processes_create_the_same_groups_once(spawned):
    calls = [tuple(map(tuple, spawned[r]["calls"])) for r in range(4)]
    assert all(c == calls[0] for c in calls)
    assert len(calls[0]) == len(set(calls[0])) == 6


def test_communicators_connect_exactly_their_members(spawned):
    expect = {"a/0/(2, 3)": {"group": [5.0, 2], "ulysses": [5.0, 2]},
              "a/1/(0, 1, 2, 3)": {"group": [6.0, 4]},
              "b/0/(1, 2)": {"group": [3.0, 2], "ring": [3.0, 2]}}
    for r in range(4):
        checks = spawned[r]["checks"]
        hybrid = checks["a/1/(0, 1, 2, 3)"]
        inner = [0, 1] if r < 2 else [2, 3]
        outer = [r % 2, r % 2 + 2]
        assert hybrid["ulysses"] == [float(sum(inner)), 2]
        assert hybrid["ring"] == [float(sum(outer)), 2]
        for key, want in expect.items():
            if key in checks:
                for name, val in want.items():
                    assert checks[key][name] == val, (r, key, name)
    assert "b/0/(1, 2)" in spawned[1]["checks"] and "b/0/(1, 2)" in spawned[2]["checks"]
