"""A Plan flattened against its batch: the plan's groups, members and sequences as numpy arrays.

This is the one place a :class:`~dcpsim.policies.plan.Plan` is turned into arrays. The simulator executes the
arrays (``sim.engine``, ``sim.simulate``), policies price a finished or candidate plan with them
(``engines.assign_engines``; HyDra's per-rank loads) and the real runtime can read its per-group work from
them, so all three see the same groups in the same order.

Contract of :func:`flatten` (``fp = flatten(plan, batch)``):

* **Groups** are numbered ``0 … G−1`` in plan order: microbatch 0's groups in the order the microbatch lists
  them, then microbatch 1's, and so on. ``fp.group_mb[g]`` is group g's microbatch; ``fp.groups.size[g]`` its
  CP degree, ``fp.groups.ulysses[g]`` its engine's inner Ulysses degree (1 for a ring) and
  ``fp.groups.first_rank[g]`` its first listed rank.
* **Members**: ``fp.member_rank`` lists every group's ranks, group after group, each group's in the order the
  group lists them (its ring order); ``fp.member_group[j]`` is the group of member j. ``fp.groups`` carries
  the same two arrays, so a cost model prices the links between the ranks a group really lists.
* **Sequences**: ``fp.groups.seq_len[i]`` / ``fp.seq_id[i]`` / ``fp.groups.seq_group[i]`` are the length (from
  ``batch``, looked up by id), id and group of the i-th sequence, group after group, each group's in its
  placement order; group g's sequences are ``fp.seq_start[g] : fp.seq_start[g + 1]``.
* All arrays are ``int64``; ``fp.groups`` is a :class:`~dcpsim.cost_models.base.GroupBatch` ready for
  ``cost_model.group_costs``.
* A sequence id the batch does not hold is a :class:`~dcpsim.policies.errors.PlanError` naming the id. Nothing
  else is checked (a repeated id, overlapping or out-of-range ranks, tokens over the budget): that is
  :func:`~dcpsim.policies.validate.validate_plan`'s work, and a plan being built may be flattened before it is
  valid.
* The batch's ids need not be sorted or contiguous; its order does not matter.
"""

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
    """Groups of all microbatches, indexed 0..G−1 in plan order, with their members and sequences (see the
    module docstring for the order of every array)."""

    pool: int
    num_microbatches: int
    group_mb: np.ndarray  # int64 [G] microbatch of each group
    groups: GroupBatch  # sequences, sizes, Ulysses degrees, first ranks, members
    member_rank: np.ndarray  # int64 [Σ sizes] pool ranks of every group, concatenated in group order
    member_group: np.ndarray  # int64 [Σ sizes] the group of each member
    seq_id: np.ndarray  # int64 [n] the id of each sequence of ``groups`` (same order as groups.seq_len)
    seq_start: np.ndarray  # int64 [G + 1] group g's sequences are seq_start[g] : seq_start[g + 1]

    @property
    def num_groups(self) -> int:
        return int(self.group_mb.shape[0])


def flatten(plan: Plan, batch: GlobalBatch) -> FlatPlan:
    """``plan``'s groups, members and sequences as arrays, lengths looked up in ``batch`` (the order of every
    array: the module docstring)."""
    ids = np.asarray(batch.seq_ids, dtype=np.int64)
    lengths = np.asarray(batch.lengths, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    g_mb: list[int] = []
    g_size: list[int] = []
    g_u: list[int] = []
    g_first: list[int] = []
    g_nseq: list[int] = []
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
            g_nseq.append(len(g.seq_ids))
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
    seq_start = np.concatenate(([0], np.cumsum(i64(g_nseq)))).astype(np.int64)
    return FlatPlan(plan.pool_size, plan.num_microbatches, i64(g_mb), groups, i64(m_rank), i64(m_group),
                    s_id_arr, seq_start)


def repeat_groups(groups: GroupBatch, owner: np.ndarray, ulysses: np.ndarray | None = None) -> GroupBatch:
    """A GroupBatch whose group k is a copy of ``groups``' group ``owner[k]`` (the same sequences in the same
    order, size, first rank and members), with inner Ulysses degree ``ulysses[k]`` where given: the
    candidates of several groups priced in one cost-model call. ``owner`` must be non-decreasing (candidates
    in group order), and ``groups``' sequences and members in group order, as :func:`flatten` makes them."""
    owner = np.asarray(owner, dtype=np.int64)
    seq_start = np.searchsorted(groups.seq_group, np.arange(groups.num_groups + 1))
    seq_idx = _concat_ranges(seq_start[owner], seq_start[owner + 1])
    seq_cand = np.repeat(np.arange(len(owner), dtype=np.int64), seq_start[owner + 1] - seq_start[owner])
    member_rank = member_group = None
    if groups.member_rank is not None and groups.member_group is not None:
        m_start = np.searchsorted(groups.member_group, np.arange(groups.num_groups + 1))
        member_rank = groups.member_rank[_concat_ranges(m_start[owner], m_start[owner + 1])]
        member_group = np.repeat(np.arange(len(owner), dtype=np.int64), groups.size[owner])
    inner = groups.ulysses[owner] if ulysses is None else np.asarray(ulysses, dtype=np.int64)
    return GroupBatch(seq_len=groups.seq_len[seq_idx], seq_group=seq_cand, size=groups.size[owner],
                      ulysses=inner, first_rank=groups.first_rank[owner], member_rank=member_rank,
                      member_group=member_group)


def _concat_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)])`` without a Python loop (int64)."""
    counts = stops - starts
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return (np.arange(total, dtype=np.int64) + offsets).astype(np.int64)
