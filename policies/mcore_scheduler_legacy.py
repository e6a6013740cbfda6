"""Megatron-Core's legacy dynamic-CP scheduler, re-implemented (docs/policies/mcore-dcp.md, "The legacy
scheduler").

Upstream: NVIDIA/Megatron-LM ``main`` @d98e8a64, ``BalancedCPScheduler.next_hdp_group``
(``megatron/core/pipeline_parallel/hybrid_cp_schedule.py``). Our own code; on power-of-two pools it returns
upstream's assignment exactly (golden cases in ``tests/data``).

The algorithm in words
----------------------
Every sequence has one degree, ``needed(L)`` = the smallest power of two with L / needed ≤ M, and one work
estimate L² / needed. Sequences are sorted longest first once; each microbatch is then formed from the
leftovers of the previous one *in the order they were left* (upstream does not re-sort).

1. *Buckets.* With k = the number of distinct degrees among the input, the input is cut, in order, into
   consecutive buckets of roughly total_work / k each: a bucket closes before a sequence that would push it
   over 1.1× that target, or when the sequences left are only just enough to give every remaining bucket one.
2. *Placement.* Repeatedly take the head of the first bucket whose head can be placed, that is, for which a
   group of exactly its degree exists or enough ranks are free. It opens a new group on the lowest free ranks
   if enough are free, else joins the least-loaded group of its degree (the earlier group on ties). There is
   no memory check: a group may hold more than M tokens per rank. Empty buckets at the front are dropped.
   Once a sequence of a smaller degree than the very first one has been placed, the microbatch stops as soon
   as the pool's max − min load is within 5% of the max (and buckets remain).
3. *Trim.* While the spread is over 5%, no rank is idle, and removing the last sequence of the most-loaded
   group (first such rank) shrinks the spread, remove it and append it to the leftovers.
4. *Fill.* While ranks are idle, the first group of the smallest size s doubles (to ``min(2s, N)``) into the
   ranks right after it; the groups behind it move right.

Leftovers are the unplaced contents of the buckets, in bucket order, then the trimmed sequences. Because the
next microbatch takes them in that order, a longer trimmed sequence can open its group after shorter ones,
at a rank that is not a multiple of its size (e.g. 4 ranks from rank 2 on a pool of 8). Upstream's process
groups are aligned blocks and could not run such a group; we keep the assignment as upstream returns it, and
the plan says so in ``meta["aligned"]``.

Pools upstream cannot run (documented fallback, as in :mod:`policies.mcore_scheduler`)
--------------------------------------------------------------------------------------
Degrees are rounded up to the sizes upstream's runtime creates (powers of two below N, and N); the fill grows
the first smallest group *that can grow* without pushing ranks past the pool, to the next such size. If no
group can grow, every sequence placed in the microbatch moves into one group spanning the whole pool (rank
order, then placement order), which never raises any rank's token count. On power-of-two pools none of this
changes a decision: the first smallest group can always double there.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from dcpsim.policies.mcore_scheduler import allowed_sizes, cp_min

BALANCE_DELTA = 0.05  # upstream ``delta``: stop / trim while max − min > 5% of max
BUCKET_SLACK = 1.1  # upstream: a bucket closes before exceeding 1.1× its work target

Seq = tuple[int, int]  # (sample id, length)


@dataclass
class _Microbatch:
    """Groups in creation order (which is also rank order): first rank, size, per-rank load, ids, lengths."""

    pool: int
    start: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    lens: list[list[int]] = field(default_factory=list)
    count_by_size: dict[int, int] = field(default_factory=dict)
    heap_by_size: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    all_heap: list[tuple[float, int]] = field(default_factory=list)  # lazy: (load, gid)
    next_free: int = 0
    peak: float = 0.0

    def _push(self, gid: int) -> None:
        entry = (self.load[gid], gid)
        heapq.heappush(self.heap_by_size[self.size[gid]], entry)
        heapq.heappush(self.all_heap, entry)

    def _valid_top(self, heap: list[tuple[float, int]]) -> tuple[float, int]:
        while heap[0][0] != self.load[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0]

    def place(self, sid: int, L: int, c: int, cost: float) -> None:
        if self.pool - self.next_free >= c:  # a new group on the lowest free ranks
            gid = len(self.start)
            self.start.append(self.next_free)
            self.size.append(c)
            self.load.append(0.0)
            self.ids.append([])
            self.lens.append([])
            self.count_by_size[c] = self.count_by_size.get(c, 0) + 1
            self.heap_by_size.setdefault(c, [])
            self.next_free += c
        else:  # the least-loaded group of this size, earliest on ties
            gid = self._valid_top(self.heap_by_size[c])[1]
        self.load[gid] += cost
        self.ids[gid].append(sid)
        self.lens[gid].append(L)
        self._push(gid)
        self.peak = max(self.peak, self.load[gid])

    def min_load(self) -> float:
        return 0.0 if self.next_free < self.pool else self._valid_top(self.all_heap)[0]


def _buckets(seqs: list[Seq], needed: dict[int, int], work: dict[int, float]) -> list[deque[Seq]]:
    """Cut ``seqs`` in order into about k buckets of equal work (k = number of distinct degrees)."""
    k = len({needed[L] for _, L in seqs})
    target = sum(work[L] for _, L in seqs) / k
    buckets: list[deque[Seq]] = []
    cur: list[Seq] = []
    cur_work = 0.0
    remaining_k = k
    n = len(seqs)
    for i, (sid, L) in enumerate(seqs):
        w = work[L]
        # upstream counts both the closed buckets and the decremented remaining_k here
        if cur and (cur_work + w > target * BUCKET_SLACK or n - i <= remaining_k - len(buckets)):
            buckets.append(deque(cur))
            cur, cur_work = [], 0.0
            remaining_k -= 1
        cur.append((sid, L))
        cur_work += w
    if cur:
        buckets.append(deque(cur))
    return buckets


def _place_all(mb: _Microbatch, buckets: list[deque[Seq]], needed: dict[int, int],
               work: dict[int, float]) -> None:
    """Step 2: place bucket heads until none fits or the pool is balanced."""
    first_needed = None
    check_balance = False
    while buckets:
        pick = None
        for b in buckets:
            if b:
                c = needed[b[0][1]]
                if mb.count_by_size.get(c) or mb.pool - mb.next_free >= c:
                    pick = b
                    break
        if pick is None:
            return
        sid, L = pick.popleft()
        c = needed[L]
        if first_needed is None:
            first_needed = c
        mb.place(sid, L, c, work[L])
        while buckets and not buckets[0]:
            buckets.pop(0)
        if c < first_needed:
            check_balance = True
        if check_balance and buckets and mb.peak - mb.min_load() <= BALANCE_DELTA * mb.peak:
            return


def _trim(mb: _Microbatch, work: dict[int, float], leftovers: list[Seq]) -> None:
    """Step 3: drop the most-loaded group's last sequence while that shrinks the spread."""
    while True:
        hi, lo = max(mb.load), min(mb.load) if mb.next_free == mb.pool else 0.0
        slack = hi - lo
        if slack <= BALANCE_DELTA * hi or lo == 0:
            return
        gid = mb.load.index(hi)  # groups are in rank order, so this is upstream's first max rank
        if len(mb.lens[gid]) <= 1:
            return
        L = mb.lens[gid][-1]
        cost = work[L]
        proj = list(mb.load)
        proj[gid] -= cost
        if max(proj) - min(proj) < slack:
            mb.load[gid] -= cost
            mb.lens[gid].pop()
            leftovers.append((mb.ids[gid].pop(), L))
        else:
            return


def _fill(mb: _Microbatch, sizes: list[int]) -> None:
    """Step 4: grow groups into the idle ranks (with the fallback of the module docstring)."""
    N = mb.pool
    while mb.next_free < N:
        s = min(mb.size)
        s_next = next(x for x in sizes if x > s)
        need = s_next - s
        for gid, size in enumerate(mb.size):
            end = mb.start[gid] + size - 1
            if size == s and end + need < N and need <= N - mb.next_free:
                mb.size[gid] = s_next
                for other in range(gid + 1, len(mb.size)):
                    mb.start[other] += need
                mb.next_free += need
                break
        else:  # fallback: one group over the whole pool with everything placed so far
            mb.ids = [[sid for ids in mb.ids for sid in ids]]
            mb.start, mb.size, mb.next_free = [0], [N], N


def next_microbatch(seqs: list[Seq], pool: int, sizes: list[int], needed: dict[int, int],
                    work: dict[int, float]) -> tuple[list[list[int]], list[Seq]]:
    """Form one microbatch from ``seqs`` (in the given order): (ids per rank, sequences left over)."""
    mb = _Microbatch(pool)
    buckets = _buckets(seqs, needed, work)
    _place_all(mb, buckets, needed, work)
    leftovers = [s for b in buckets for s in b]
    _trim(mb, work, leftovers)
    _fill(mb, sizes)
    ranks: list[list[int]] = [[] for _ in range(pool)]
    for st, sz, ids in zip(mb.start, mb.size, mb.ids):
        for r in range(st, st + sz):
            ranks[r] = list(ids)
    return ranks, leftovers


def schedule_legacy(lengths: list[int], pool: int, budget: int) -> list[list[list[int]]]:
    """All microbatches of the legacy scheduler; inputs are assumed validated (see ``mcore_dcp``)."""
    sizes = allowed_sizes(pool)
    needed: dict[int, int] = {}
    work: dict[int, float] = {}
    for L in set(lengths):
        lower = min(cp_min(L, budget), pool)
        needed[L] = next(s for s in sizes if s >= lower)
        work[L] = (L * L) / needed[L]
    remaining: list[Seq] = sorted(enumerate(lengths), key=lambda t: t[1], reverse=True)
    out = []
    while remaining:
        ranks, remaining = next_microbatch(remaining, pool, sizes, needed, work)
        out.append(ranks)
    return out
