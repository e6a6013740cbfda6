"""policies.flatten: the one flattening of a plan against its batch (its documented order), and the engine
choice that prices candidates through it."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel
from dcpsim.cost_models.base import GroupBatch
from dcpsim.policies.engines import assign_engines, engine_for, ulysses_degrees
from dcpsim.policies.errors import PlanError
from dcpsim.policies.flatten import flatten, repeat_groups
from dcpsim.policies.plan import CPGroup, Engine, make_plan
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job


def _plan():
    ring = lambda ranks, ids: CPGroup(tuple(ranks), tuple(ids), Engine.for_size("ring", len(ranks)))
    return make_plan("t", 8, [
        [CPGroup((4, 5, 6, 7), (30, 10), Engine.for_size("hybrid", 4, ulysses=2)), ring([0], [7]),
         ring([1, 3], [])],
        [ring([2, 0], [20, 40, 50])],
    ])


def test_flatten_follows_plan_order_and_looks_lengths_up_by_id() -> None:
    # ids out of order and not contiguous: lengths are found by id, not by position
    batch = GlobalBatch.of([500, 300, 100, 200, 400, 700], ids=[50, 30, 10, 20, 40, 7])
    fp = flatten(_plan(), batch)
    assert (fp.pool, fp.num_microbatches, fp.num_groups) == (8, 2, 4)
    assert fp.group_mb.tolist() == [0, 0, 0, 1]
    assert fp.groups.size.tolist() == [4, 1, 2, 2] and fp.groups.ulysses.tolist() == [2, 1, 1, 1]
    assert fp.groups.first_rank.tolist() == [4, 0, 1, 2]
    assert fp.member_rank.tolist() == [4, 5, 6, 7, 0, 1, 3, 2, 0]  # each group's ranks in its listed order
    assert fp.member_group.tolist() == [0, 0, 0, 0, 1, 2, 2, 3, 3]
    assert fp.seq_id.tolist() == [30, 10, 7, 20, 40, 50]  # group after group, placement order
    assert fp.groups.seq_len.tolist() == [300, 100, 700, 200, 400, 500]
    assert fp.groups.seq_group.tolist() == [0, 0, 1, 3, 3, 3]
    assert fp.seq_start.tolist() == [0, 2, 3, 3, 6]  # the empty group 2 has an empty slice
    assert fp.groups.member_rank is not None and fp.groups.member_rank.tolist() == fp.member_rank.tolist()
    assert all(a.dtype == np.int64 for a in (fp.group_mb, fp.member_rank, fp.seq_id, fp.seq_start,
                                             fp.groups.seq_len, fp.groups.seq_group, fp.groups.size))


def test_flatten_names_an_id_the_batch_lacks() -> None:
    batch = GlobalBatch.of([500, 300, 100, 200, 400], ids=[50, 30, 10, 20, 40])  # no id 7
    with pytest.raises(PlanError, match="sequence id 7, which is not in the batch"):
        flatten(_plan(), batch)


def test_repeat_groups_copies_groups_with_new_ulysses_degrees() -> None:
    batch = GlobalBatch.of([500, 300, 100, 200, 400, 700], ids=[50, 30, 10, 20, 40, 7])
    g = flatten(_plan(), batch).groups
    rep = repeat_groups(g, np.array([0, 0, 2, 3]), np.array([1, 4, 2, 1]))
    assert rep.seq_len.tolist() == [300, 100, 300, 100, 200, 400, 500]
    assert rep.seq_group.tolist() == [0, 0, 1, 1, 3, 3, 3]
    assert rep.size.tolist() == [4, 4, 2, 2] and rep.ulysses.tolist() == [1, 4, 2, 1]
    assert rep.first_rank.tolist() == [4, 4, 1, 2]
    assert rep.member_rank is not None and rep.member_group is not None
    assert rep.member_rank.tolist() == [4, 5, 6, 7, 4, 5, 6, 7, 1, 3, 2, 0]
    assert rep.member_group.tolist() == [0] * 4 + [1] * 4 + [2, 2, 3, 3]
    plain = GroupBatch(g.seq_len, g.seq_group, g.size, g.ulysses, g.first_rank)  # no members: none copied
    assert repeat_groups(plain, np.array([1])).member_rank is None


def test_auto_engines_are_each_groups_cheapest_split() -> None:
    """assign_engines('auto') prices every group's candidates in one call on the flattened plan; each group's
    choice is what pricing that group alone gives (contiguous groups: no member list needed)."""
    job = small_job(pool=16, max_tokens_per_rank=65536)
    cm = AnalyticCostModel(job)
    lengths = [60000, 30000, 9000, 4000, 2000, 1500, 800, 700]
    batch = GlobalBatch.of(lengths, ids=[11, 3, 5, 8, 2, 9, 4, 6])
    ring = lambda ranks, ids: CPGroup(tuple(ranks), tuple(ids), Engine.for_size("ring", len(ranks)))
    plan = make_plan("t", 16, [[ring(range(0, 8), [11]), ring(range(8, 12), [3, 5]), ring([12, 13], [8, 2])],
                               [ring(range(0, 16), [9, 4, 6])]])
    out = assign_engines(plan, "auto", job, cm, batch)
    length_of = dict(zip(batch.seq_ids.tolist(), batch.lengths.tolist(), strict=True))
    for before, after in zip(plan.microbatches, out.microbatches, strict=True):
        for g, h in zip(before.groups, after.groups, strict=True):
            assert (h.ranks, h.seq_ids) == (g.ranks, g.seq_ids)
            tokens = np.array([length_of[s] for s in g.seq_ids])
            alone = engine_for("auto", g.size, job, cm, tokens, g.ranks[0])
            assert h.engine == alone and h.engine.ulysses in ulysses_degrees(g.size, job)
    assert out.meta["cp_engine"] == "auto"
    assert {g.engine.kind for mb in out.microbatches for g in mb.groups if g.size > 1} != {"ring"}
