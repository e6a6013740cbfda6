"""Megatron-Core's current dynamic-CP scheduler, re-implemented (docs/policies/mcore-dcp.md).

Upstream: NVIDIA/Megatron-LM ``dev`` @d48bd6be, ``DefaultDynamicCPScheduler`` driving
``next_hdp_group_packing_aware`` (``megatron/core/datasets/data_schedule{,_utils}.py``). This module is our
own code; for every input the upstream accepts on a power-of-two pool it returns the same assignment
(pinned by 200 golden cases in ``tests/data``).

The algorithm in words
----------------------
Sequences are sorted by length, longest first (stable: equal lengths keep the lower id first). Microbatches
are formed one at a time from whatever is still unscheduled.

*Degrees.* A sequence of length L needs at least ``cp_min(L) = max(m0, 2^ceil(log2(L / M)))`` ranks to fit the
per-rank token budget M. Its estimated work on c ranks is L²/c per rank (attention only).

*Placement.* The longest remaining sequence opens group 0 on ranks ``0..cp_min-1``; ``cap = 1.05 · L_first ·
M`` bounds any rank's load (it never binds once the memory check holds, but it is kept). Each following
sequence looks at its options in a fixed order: for every allowed size c ≥ cp_min (ascending), first every
existing group of size c in creation order whose per-rank tokens stay ≤ M after adding L/c, then a new group
on the lowest-numbered c free ranks (free ranks carry no load, and the assigned ranks always form a prefix).
An option's *score* is the largest per-rank load of the whole pool after the placement. The strictly smallest
score wins, so earlier options win ties. A sequence with no option waits for a later microbatch.

Three facts make this fast without changing a single decision. Each size class keeps its groups' least
tokens per rank, so a class where even that group cannot take the sequence's L/c is skipped without a look
(at n = 8,192, W = 1,024 most sequences of a microbatch's pass fit no group once the pool is carved).
All members of a group carry the same load, so the score of adding to group g is ``max(G, load_g + L²/c)``
with G the current pool maximum (no per-rank scan). And no score can be below G, so the first option that
scores exactly G ends the search. Groups of one size
live in numpy arrays, so "first best group of size c" is a handful of vector operations.

*Filling idle ranks.* While ranks are empty, the first group (creation order) of the smallest size s that can
grow does so to the next size s' (upstream: ``min(2s, N)``), taking the ranks right after it; the groups
behind it move right. If none can grow, the whole pool becomes one group that takes sequences of this
microbatch's input first-fit (Σ L/N ≤ M) and everything else goes back to the unscheduled list.

Pools upstream cannot run (our documented fallback)
---------------------------------------------------
Upstream's runtime creates CP process groups, aligned blocks of the pool, only of sizes ``2^i ≥ m0`` with
``i < floor(log2 N)``, plus the full pool N (``parallel_state.create_dynamic_dp_cp_groups``). On a
power-of-two pool with a power-of-two ``m0`` that is every size the scheduler can ask for. Otherwise (N = 12, 24, …
or m0 = 3) the upstream scheduler may ask for a
size that does not exist (8 on a pool of 12, 3 with m0 = 3) or, while filling, push ranks past the end of the
pool (an IndexError upstream). Our fallback keeps upstream's rules and only restricts them to what can run:

* allowed sizes are exactly the sizes upstream creates; a sequence's candidates are the allowed sizes
  ≥ min(cp_min(L), N), so the full pool serves lengths whose power-of-two degree would exceed N;
* the fill grows a group to the next allowed size, and only if the ranks it pushes stay inside the pool;
  otherwise the next group is tried, and then upstream's own full-pool fallback applies.

Each of these changes only options upstream never picks on power-of-two pools, so golden outputs are
unchanged; on other pools the output equals upstream's whenever upstream's output could run at all.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

WORKLOAD_CAP_DELTA = 0.05  # upstream ``_DYNAMIC_CP_WORKLOAD_CAP_DELTA``
_SMALL_CLASS = 12  # below this many groups of one size, a Python loop beats numpy's call overhead


def cp_min(length: int, max_seqlen_per_rank: int, min_cp_size: int = 1) -> int:
    """Smallest power of two c with L / c ≤ M, at least ``min_cp_size`` (upstream ``dcp_gpus_needed``).

    Computed with the same float expression as upstream, so edge cases round the same way.
    """
    raw = max(1, 2 ** math.ceil(math.log2(length / max_seqlen_per_rank)))
    return max(min_cp_size, raw)


def allowed_sizes(pool: int, min_cp_size: int = 1) -> list[int]:
    """CP group sizes the upstream runtime creates, ascending: the powers of two ``2^i ≥ m0`` with
    ``i < floor(log2 N)``, then N (``[2**i for i in range(int(log2(N)))]`` upstream, so a pool of 12 gets
    1, 2, 4 and 12, but no 8)."""
    sizes = []
    s = 1
    while 2 * s <= pool:
        if s >= min_cp_size:
            sizes.append(s)
        s *= 2
    sizes.append(pool)
    return sizes


def candidate_start(lengths: list[int], sizes: list[int], max_seqlen_per_rank: int,
                    min_cp_size: int) -> dict[int, int]:
    """For every distinct length, the index into ``sizes`` of its smallest candidate degree."""
    pool = sizes[-1]
    return {L: bisect.bisect_left(sizes, min(cp_min(L, max_seqlen_per_rank, min_cp_size), pool))
            for L in set(lengths)}


@dataclass
class _SizeClass:
    """The groups of one size in creation order, with their per-rank load and tokens as arrays."""

    gids: list[int] = field(default_factory=list)
    load: np.ndarray = field(default_factory=lambda: np.zeros(0))
    packed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lo: float = math.inf  # the least tokens per rank of any group: no group fits once lo + share > budget

    def append(self, gid: int, load: float, packed: float) -> int:
        k = len(self.gids)
        if k == self.load.shape[0]:
            cap = max(8, 2 * k)
            self.load = np.resize(self.load, cap)
            self.packed = np.resize(self.packed, cap)
        self.gids.append(gid)
        self.load[k] = load
        self.packed[k] = packed
        self.lo = min(self.lo, packed)
        return k

    def set_packed(self, j: int, packed: float) -> None:
        """Group ``j``'s tokens per rank grew to ``packed``."""
        old = float(self.packed[j])
        self.packed[j] = packed
        if old == self.lo:
            self.lo = float(self.packed[:len(self.gids)].min())

    def best(self, G: float, cost: float, share: float, budget: float, cap: float) -> tuple[float, int]:
        """(score, position) of the first lowest-scoring group that can take a sequence, or (inf, -1).

        A group qualifies when its tokens per rank plus ``share`` stay ≤ ``budget`` and its score
        ``max(G, load + cost)`` stays ≤ ``cap``.
        """
        k = len(self.gids)
        if self.lo + share > budget:  # every group fails the token test (float addition is monotone)
            return math.inf, -1
        if k <= _SMALL_CLASS:
            best_v, best_j = math.inf, -1
            load, packed = self.load, self.packed
            for j in range(k):
                if float(packed[j]) + share > budget:
                    continue
                v = max(G, float(load[j]) + cost)
                if v <= cap and v < best_v:
                    best_v, best_j = v, j
                    if v == G:
                        break
            return best_v, best_j
        vals = self.load[:k] + cost
        np.maximum(vals, G, out=vals)
        vals[self.packed[:k] + share > budget] = np.inf
        j = int(vals.argmin())  # the first minimum: the earliest group on ties
        v = float(vals[j])
        # the cap is a bound on the score, so the first minimum passes it if any fitting group does
        return (v, j) if v <= cap else (math.inf, -1)


@dataclass
class _Microbatch:
    """Groups of one microbatch under construction: per group its first rank, size, load, tokens, ids."""

    pool: int
    start: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    packed: list[float] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)  # index of the group inside its size class
    classes: dict[int, _SizeClass] = field(default_factory=dict)
    next_free: int = 0  # assigned ranks are always the prefix 0..next_free-1
    peak: float = 0.0  # G: the largest per-rank load of the pool

    def open(self, sid: int, size: int, cost: float, share: float) -> None:
        gid = len(self.start)
        self.start.append(self.next_free)
        self.size.append(size)
        self.load.append(cost)
        self.packed.append(share)
        self.ids.append([sid])
        self.pos.append(self.classes.setdefault(size, _SizeClass()).append(gid, cost, share))
        self.next_free += size
        self.peak = max(self.peak, cost)

    def add(self, gid: int, sid: int, cost: float, share: float) -> None:
        self.load[gid] += cost
        self.packed[gid] += share
        self.ids[gid].append(sid)
        cls, j = self.classes[self.size[gid]], self.pos[gid]
        cls.load[j] = self.load[gid]
        cls.set_packed(j, self.packed[gid])
        self.peak = max(self.peak, self.load[gid])

    def rank_lists(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.pool)]
        for st, sz, ids in zip(self.start, self.size, self.ids):
            for r in range(st, st + sz):
                out[r] = list(ids)
        return out


def _place(mb: _Microbatch, seqs: list[tuple[int, int]], sizes: list[int], first_size: dict[int, int],
           budget: int) -> list[tuple[int, int]]:
    """Placement pass over ``seqs`` (sorted, longest first); returns the sequences left for later."""
    N = mb.pool
    sid, L = seqs[0]
    c = sizes[first_size[L]]
    mb.open(sid, c, (L * L) / c, L / c)
    cap = float(L) * float(budget) * (1.0 + WORKLOAD_CAP_DELTA)
    leftovers: list[tuple[int, int]] = []
    for sid, L in seqs[1:]:
        G = mb.peak
        best_v, best = math.inf, None  # best: (size, gid or -1 for a new group)
        for c in sizes[first_size[L]:]:
            cost = (L * L) / c
            share = L / c
            cls = mb.classes.get(c)
            if cls is not None and cls.gids and cls.lo + share <= budget:  # else no group of c takes it
                v, j = cls.best(G, cost, share, budget, cap)
                if v < best_v:
                    best_v, best = v, (c, cls.gids[j])
                    if v == G:
                        break
            if N - mb.next_free >= c:
                v = max(G, cost)
                if v <= cap and v < best_v:
                    best_v, best = v, (c, -1)
                    if v == G:
                        break
        if best is None:
            leftovers.append((sid, L))
            continue
        c, gid = best
        if gid < 0:
            mb.open(sid, c, (L * L) / c, L / c)
        else:
            mb.add(gid, sid, (L * L) / c, L / c)
    return leftovers


def _grow_once(mb: _Microbatch, sizes: list[int]) -> bool:
    """One step of the idle-rank fill; False when no group of the smallest size can grow."""
    N = mb.pool
    s = min(mb.size)
    s_next = next(x for x in sizes if x > s)  # upstream: min(2s, N); equal on power-of-two pools
    need = s_next - s
    empty = N - mb.next_free
    for gid, size in enumerate(mb.size):
        if size != s:
            continue
        end = mb.start[gid] + s - 1
        # upstream's test, then ours: the ranks pushed right must stay inside the pool
        if end + 1 > mb.next_free or end + need >= N or need > empty:
            continue
        mb.size[gid] = s_next
        for other in range(len(mb.size)):
            if mb.start[other] > end:
                mb.start[other] += need
        mb.next_free += need
        return True
    return False


def next_microbatch(seqs: list[tuple[int, int]], pool: int, budget: int, sizes: list[int],
                    first_size: dict[int, int]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Form one microbatch from ``seqs`` (sorted longest first): (ids per rank, sequences left over)."""
    mb = _Microbatch(pool)
    leftovers = _place(mb, seqs, sizes, first_size, budget)
    while mb.next_free < pool:
        if not _grow_once(mb, sizes):
            # the whole pool becomes one group, first-fit in order; all others wait
            chosen: list[int] = []
            leftovers = []
            packed = 0.0
            for sid, L in seqs:
                if packed + L / pool <= budget:
                    chosen.append(sid)
                    packed += L / pool
                else:
                    leftovers.append((sid, L))
            return [list(chosen) for _ in range(pool)], leftovers
    return mb.rank_lists(), leftovers


def schedule_current(lengths: list[int], pool: int, budget: int, min_cp_size: int = 1) -> list[list[list[int]]]:
    """All microbatches of the current scheduler; inputs are assumed validated (see ``mcore_dcp``)."""
    sizes = allowed_sizes(pool, min_cp_size)
    first_size = candidate_start(lengths, sizes, budget, min_cp_size)
    remaining = sorted(enumerate(lengths), key=lambda t: t[1], reverse=True)
    out = []
    while remaining:
        ranks, remaining = next_microbatch(remaining, pool, budget, sizes, first_size)
        out.append(ranks)
    return out
