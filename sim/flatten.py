"""A Plan as flat numpy arrays: what the engine and the cost model consume (no per-sequence Python later)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.base import GroupBatch
from dcpsim.policies.errors import PlanError
from dcpsim.policies.plan import Plan

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch


@dataclass(frozen=True)
class FlatPlan:
    """Groups of all microbatches, indexed 0..G−1 in plan order, with their members and sequences."""

    pool: int
    num_microbatches: int
    group_mb: np.ndarray  # int64 [G] microbatch of each group
    groups: GroupBatch  # sequences, sizes, Ulysses degrees, first ranks
    member_rank: np.ndarray  # int64 [Σ sizes] pool ranks of every group, concatenated in group order
    member_group: np.ndarray  # int64 [Σ sizes] the group of each member

    @property
    def num_groups(self) -> int:
        return int(self.group_mb.shape[0])


def flatten(plan: Plan, batch: GlobalBatch) -> FlatPlan:
    ids = np.asarray(batch.seq_ids, dtype=np.int64)
    lengths = np.asarray(batch.lengths, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    g_mb: list[int] = []
    g_size: list[int] = []
    g_u: list[int] = []
    g_first: list[int] = []
    m_rank: list[int] = []
    m_group: list[int] = []
    s_id: list[int] = []
    s_group: list[int] = []
    gi = 0
    for k, mb in enumerate(plan.microbatches):
        for g in mb.groups:
            g_mb.append(k)
            g_size.append(g.size)
            g_u.append(g.engine.ulysses)
            g_first.append(g.ranks[0])
            m_rank.extend(g.ranks)
            m_group.extend([gi] * g.size)
            s_id.extend(g.seq_ids)
            s_group.extend([gi] * len(g.seq_ids))
            gi += 1
    s_id_arr = np.asarray(s_id, dtype=np.int64)
    pos = np.searchsorted(sorted_ids, s_id_arr)
    pos = np.minimum(pos, max(len(sorted_ids) - 1, 0))
    if len(s_id_arr) and (len(sorted_ids) == 0 or np.any(sorted_ids[pos] != s_id_arr)):
        bad = s_id_arr[sorted_ids[pos] != s_id_arr][0] if len(sorted_ids) else s_id_arr[0]
        raise PlanError(f"plan names sequence id {int(bad)}, which is not in the batch")
    i64 = lambda x: np.asarray(x, dtype=np.int64)
    groups = GroupBatch(seq_len=lengths[order[pos]] if len(s_id_arr) else i64([]), seq_group=i64(s_group),
                        size=i64(g_size), ulysses=i64(g_u), first_rank=i64(g_first),
                        member_rank=i64(m_rank), member_group=i64(m_group))
    return FlatPlan(plan.pool_size, plan.num_microbatches, i64(g_mb), groups, i64(m_rank), i64(m_group))

