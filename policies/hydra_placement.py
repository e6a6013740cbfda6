"""HyDra's placement: sequences with known degrees and shares → CP groups in microbatches, with lazy heaps.

Every CP group is a *bin* with a load (s; its overhead plus the work of its sequences at its size and engine),
a token count per rank (≤ the memory budget M) and a capacity: (1 + tolerance) · τ, or (1 + tolerance) · h in a
microbatch of a heavy sequence of height h > τ. Bins of one (size, engine) form a *class* whose bins sit in a
min-heap keyed by load − capacity (most room first). A bin whose load changes gets a fresh heap entry and a new
version number; the old entry stays in the heap and is discarded when it surfaces (a *lazy* heap), so every
update is one O(log B) push and no heap is ever searched or re-built. Microbatches sit in one more lazy heap,
keyed by free ranks.

Heavy sequences first: each opens a group in microbatches of their own (first fit by free ranks, largest
degree first); a microbatch's capacity is (1 + tolerance) times its tallest heavy load.
Phase A — the structure (sequences above the smallest degree), largest degree first, then largest share:
join the roomiest group of the class if the load stays within τ (or h; no tolerance used yet), else carve a
new group from the microbatch with the most free ranks, else join a group within the tolerance, else open a
microbatch. Microbatches are carved left to right in non-increasing sizes, so power-of-two groups land on
aligned blocks (and groups of ≤ G/t ranks stay inside a node).
Phase B — the fill (sequences of the smallest degree, largest share first, i.e. LPT): the remaining free
ranks become groups of the smallest degree, lazily — one *free-block* heap entry per microbatch stands for
all of its free blocks, so idle ranks cost nothing. Each sequence goes to the bin with the most room *now*,
over all classes (its work re-priced at that class's size and engine: a short document may ride in the
spare capacity of a long sequence's group), provided load and tokens fit; classes are visited in order of
their top room, so the first fit is the answer. A bin that fails only the token check is set aside for this
sequence (at most ``PROBES`` per class) and pushed back after; a sequence that fits nowhere opens a microbatch.

Cost: O((n + m) log n) heap operations for n sequences and m microbatches (bins exist only where sequences
are), times the classes visited (usually one; at most log2 W + 2 sizes × engines); no step scans the pool.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dcpsim.policies.hydra_target import pack_heavy

PROBES = 8  # bins set aside per class and sequence when only the token budget fails


@dataclass
class Bin:
    """One CP group under construction."""

    mb: int
    first: int
    size: int
    u: int  # inner Ulysses degree of the planning engine
    cap: float
    load: float
    tokens: float = 0.0  # per rank
    seqs: list[int] = field(default_factory=list)  # positions in the batch
    version: int = 0


@dataclass
class Layout:
    """The bins of every microbatch, and each microbatch's capacity."""

    bins: list[Bin]
    caps: list[float]
    cursor: list[int]  # first free rank of each microbatch
    heavy_mbs: int
    slow: np.ndarray | None = None  # [W] the pool ranks' slow-down factors placement weighted by (None: none)


class _Packer:
    def __init__(self, pool: int, budget: float, tau: float, tol: float, aligned: bool,
                 overhead: dict[tuple[int, int], float], slow: np.ndarray | None = None) -> None:
        self.W, self.M, self.tau, self.tol, self.aligned = pool, budget, tau, tol, aligned
        self.overhead = overhead
        self.slow = slow  # [W] each pool rank's slow-down factor (stragglers); None: every rank at full speed
        self.bins: list[Bin] = []
        self.caps: list[float] = []
        self.cursor: list[int] = []
        self.classes: dict[tuple[int, int], list[tuple[float, int, int]]] = {}
        self.free: list[tuple[int, float, int]] = []  # (-free ranks, -cap, mb): most free ranks first
        self.short = 0  # microbatches below τ (a height profile's ramps)

    # ---- microbatches and bins ----------------------------------------------------------------------
    def new_mb(self, height: float = 0.0, exact: bool = False) -> int:
        """A new microbatch of capacity (1 + tol) · max(τ, height), or (1 + tol) · height if ``exact``."""
        k = len(self.caps)
        self.caps.append((1.0 + self.tol) * (height if exact else max(self.tau, height)))
        self.cursor.append(0)
        heapq.heappush(self.free, (-self.W, -self.caps[k], k))
        return k

    def block_cap(self, k: int, first: int, size: int) -> float:
        """Capacity of a group on ranks first .. first + size − 1 of microbatch k: the microbatch's, divided by
        the slowest member's slow-down factor (a group runs at its slowest member's pace: sim.engine)."""
        return self.caps[k] / self.slowest(first, size)

    def slowest(self, first: int, size: int) -> float:
        """The largest slow-down factor of ranks first .. first + size − 1 (1 without stragglers)."""
        return 1.0 if self.slow is None else float(self.slow[first:first + size].max())

    def fits_block(self, k: int, size: int) -> bool:
        c = self.cursor[k]
        return self.W - c >= size and (not self.aligned or c % size == 0)

    def carve(self, k: int, size: int, u: int) -> Bin:
        b = Bin(k, self.cursor[k], size, u, self.block_cap(k, self.cursor[k], size), self.overhead[size, u])
        self.cursor[k] += size
        self.bins.append(b)
        heapq.heappush(self.free, (-(self.W - self.cursor[k]), -self.caps[k], k))
        self.push(len(self.bins) - 1)
        return b

    def push(self, gid: int) -> None:
        b = self.bins[gid]
        heapq.heappush(self.classes.setdefault((b.size, b.u), []), (b.load - b.cap, gid, b.version))

    def add(self, gid: int, pos: int, work: float, tokens: float) -> None:
        b = self.bins[gid]
        b.seqs.append(pos)
        b.load += work
        b.tokens += tokens
        b.version += 1
        self.push(gid)

    def roomiest_mb(self, size: int, load: float = 0.0) -> int | None:
        """The microbatch with the most free ranks that can carve ``size`` and whose height (capacity without
        the tolerance) holds ``load`` (lazy: stale entries dropped; short microbatches of a height profile are
        passed over, at most ``PROBES`` + 2 · their number)."""
        aside: list[tuple[int, float, int]] = []
        found = None
        while self.free and len(aside) < PROBES + 2 * self.short:
            nf, _ncap, k = self.free[0]
            if -nf != self.W - self.cursor[k]:
                heapq.heappop(self.free)
                continue
            if -nf < size:
                break
            if self.fits_block(k, size) and (not self.short
                                             or load <= self.caps[k] / (1.0 + self.tol) * (1 + 1e-12)):
                found = k
                break
            aside.append(heapq.heappop(self.free))
        for e in aside:
            heapq.heappush(self.free, e)
        return found

    # A class heap also holds *free-block* entries (gid = −(k + 1)): "a new group of this class could be
    # carved from microbatch k", load = the class overhead, no tokens, valid while k's cursor is unchanged.
    # They stand for all of k's free blocks at once, so free ranks cost nothing until a sequence uses one.
    def offer_free(self, k: int, cls: tuple[int, int]) -> None:
        if self.fits_block(k, cls[0]):
            heapq.heappush(self.classes.setdefault(cls, []),
                           (self.overhead[cls] - self.block_cap(k, self.cursor[k], cls[0]), -(k + 1), self.cursor[k]))

    def _peek(self, cls: tuple[int, int], heap: list) -> tuple[float, float, float, int] | None:
        """(load, capacity, tokens, gid) of the valid top entry of ``heap`` (stale entries dropped)."""
        while heap:
            _key, gid, ver = heap[0]
            if gid < 0:
                k = -gid - 1
                if ver == self.cursor[k] and self.fits_block(k, cls[0]):
                    return self.overhead[cls], self.block_cap(k, self.cursor[k], cls[0]), 0.0, gid
            elif ver == self.bins[gid].version:
                b = self.bins[gid]
                return b.load, b.cap, b.tokens, gid
            heapq.heappop(heap)
        return None

    def realize(self, gid: int, cls: tuple[int, int]) -> int:
        """The bin behind a heap entry: a free-block entry carves its group now (and offers the next)."""
        if gid >= 0:
            return gid
        k = -gid - 1
        self.carve(k, *cls)
        self.offer_free(k, cls)
        return len(self.bins) - 1

    def top_room(self, cls: tuple[int, int]) -> float:
        """Capacity − load of the roomiest bin (or free block) of class ``cls``; −inf if none."""
        top = self._peek(cls, self.classes.get(cls, []))
        return -np.inf if top is None else top[1] - top[0]

    def best_in_class(self, cls: tuple[int, int], work: float, tokens: float,
                      strict: bool) -> tuple[float, int] | None:
        """(room after placing, bin or free-block id) of the roomiest entry of class ``cls`` = (size, u) that
        takes ``work`` and ``tokens`` within its capacity (capacity / (1 + tol), i.e. τ or h, if ``strict``)."""
        heap = self.classes.get(cls)
        if not heap:
            return None
        aside: list[tuple[float, int, int]] = []  # entries of the class's heap
        found = None
        while len(aside) < PROBES:
            top = self._peek(cls, heap)
            if top is None:
                break
            load, cap, tok, gid = top
            if strict:
                cap /= 1.0 + self.tol
            if load + work > cap:
                break  # the roomiest entry of the class cannot take it: none can
            if tok + tokens <= self.M * (1 + 1e-12):
                found = (load + work - cap, gid)
                break
            aside.append(heapq.heappop(heap))
        for e in aside:
            heapq.heappush(heap, e)
        return found

    def best_for_fill(self, cls: tuple[int, int], work: float, tokens: float,
                      blocked: list) -> tuple[float, int] | None:
        """Phase B's :meth:`best_in_class`: a bin that fails only the token check leaves the class heap for
        ``blocked``, a heap keyed by the longest sequence it could still take in its class, (M − tokens)·size,
        from which the fill loop returns it once a short enough sequence comes (each bin version is blocked
        at most once per readmission, so the search never re-reads the same full bins)."""
        heap = self.classes.get(cls)
        if not heap:
            return None
        lim = self.M * (1 + 1e-12)
        while True:
            top = self._peek(cls, heap)
            if top is None:
                return None
            load, cap, tok, gid = top
            if load + work > cap:
                return None  # the roomiest entry of the class cannot take it: none can
            if tok + tokens <= lim:
                return (load + work - cap, gid)
            heapq.heappush(blocked, (-(lim - tok) * cls[0], cls, heapq.heappop(heap)))


def place(*, pool: int, budget: float, tau: float, tol: float, aligned: bool, lengths: np.ndarray,
          sizes: np.ndarray, ulysses: np.ndarray, shares: np.ndarray, heavy: np.ndarray, m_light: int,
          order_key: np.ndarray, overhead: dict[tuple[int, int], float], fill: tuple[int, int],
          slowdown: np.ndarray | None = None,
          fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
          fill_lower: Callable[[np.ndarray, int, int], np.ndarray | None] | None = None,
          light_heights: np.ndarray | None = None) -> Layout:
    """Place every sequence (positions 0..n−1).

    ``sizes``, ``ulysses``, ``shares``: each sequence's degree, planning engine and per-rank work there;
    ``heavy``: set apart; ``order_key``: tie-break (the sequence ids); ``overhead[(size, u)]``: a group's fixed
    load; ``slowdown`` ([W] or None): each pool rank's slow-down factor, dividing the capacity of its groups; ``fill`` = (size, u) of the fill class (the smallest degree); ``fill_work(positions, sizes, u)`` (elementwise)
    prices fill sequences in another class, ``fill_lower`` (optional) a lower bound of that price (or None); ``light_heights``: the target height of each light microbatch in
    run order (None: τ for all ``m_light``); those below τ take only fill sequences (phase B)."""
    pk = _Packer(pool, budget, tau, tol, aligned, overhead, slowdown)
    tok = lengths / sizes
    is_fill = ~heavy & (sizes == fill[0]) & (ulysses == fill[1])
    # Heavy sequences: first fit over microbatches of their own, largest degree first (aligned carving).
    hv = np.flatnonzero(heavy)
    hv = hv[np.lexsort((order_key[hv], -shares[hv], -sizes[hv]))]
    hv_load = shares[hv] + np.array([overhead[int(c), int(u)] for c, u in zip(sizes[hv], ulysses[hv])])
    where, heights = pack_heavy(hv_load, sizes[hv], pool)
    for h in heights.tolist():
        pk.new_mb(h)
    for i, k in zip(hv.tolist(), where.tolist()):
        pk.carve(k, int(sizes[i]), int(ulysses[i]))
        pk.add(len(pk.bins) - 1, i, float(shares[i]), float(tok[i]))
    heavy_mbs = len(pk.caps)
    if light_heights is None:
        for _ in range(m_light):
            pk.new_mb()
    else:  # a height profile (hydra_order.height_profile): short microbatches are kept for the fill
        for h in np.asarray(light_heights, dtype=np.float64).tolist():
            pk.new_mb(h, exact=True)
            pk.short += h < tau
    # Phase A: the structure.
    big = np.flatnonzero(~heavy & ~is_fill)
    big = big[np.lexsort((order_key[big], -shares[big], -sizes[big]))]
    for i in big.tolist():
        c, u, w, t = int(sizes[i]), int(ulysses[i]), float(shares[i]), float(tok[i])
        hit = pk.best_in_class((c, u), w, t, strict=True)
        if hit is None:
            k = pk.roomiest_mb(c, pk.overhead[c, u] + w)
            if k is None:
                hit = pk.best_in_class((c, u), w, t, strict=False)
                if hit is None:
                    k = pk.new_mb()
            if hit is None:
                pk.carve(k, c, u)
                hit = (0.0, len(pk.bins) - 1)
        pk.add(hit[1], i, w, t)
    # Phase B: free ranks become fill-class groups (as free-block entries); LPT over every class.
    for k in range(len(pk.caps)):
        pk.offer_free(k, fill)
    small = np.flatnonzero(is_fill)
    small = small[np.lexsort((order_key[small], -shares[small]))]
    classes = sorted(set(pk.classes) | {fill})
    room = {cls: pk.top_room(cls) for cls in classes}
    # Another class's rooms only shrink in phase B (only the fill class gets new bins), so a sequence whose
    # work there exceeds the class's room now never goes there: ``fill_lower`` (a lower bound of the work,
    # None: none) screens them out, and only the others are priced.
    work_at = {fill: shares[small]}
    # (class, where in small, the screen's array or None): priced together in one fill_work call
    ask: list[tuple[tuple[int, int], np.ndarray, np.ndarray]] = []
    for cls in classes:
        if cls != fill:
            lower = fill_lower(small, *cls) if fill_lower is not None else None
            ask.append((cls, np.arange(len(small)) if lower is None else np.flatnonzero(lower <= room[cls]),
                        np.full(len(small), np.inf) if lower is None else lower))
    if ask:
        priced = fill_work(np.concatenate([small[m] for _, m, _ in ask]),
                           np.concatenate([np.full(len(m), c[0]) for c, m, _ in ask]),
                           np.concatenate([np.full(len(m), c[1]) for c, m, _ in ask]))
        a = 0
        for cls, m, arr in ask:
            arr[m] = priced[a:a + len(m)]
            a += len(m)
            work_at[cls] = arr
    work_list = {cls: arr.tolist() for cls, arr in work_at.items()}
    small_len = lengths[small].astype(np.float64).tolist()
    blocked: list = []  # bins full of tokens for now (best_for_fill)
    for j, i in enumerate(small.tolist()):
        L = small_len[j]
        while blocked and -blocked[0][0] >= L:  # bins that can take this many tokens again
            _, cls, e = heapq.heappop(blocked)
            heapq.heappush(pk.classes[cls], e)
            room[cls] = pk.top_room(cls)
        while True:
            placed = False
            # The class whose roomiest bin has the most room first: the first bin that takes the sequence
            # is the one with the most room now (LPT), without a look at every class.
            first = max(classes, key=room.__getitem__)
            w = work_list[first][j]
            if room[first] >= w:
                hit = pk.best_for_fill(first, w, L / first[0], blocked)
                if hit is not None:
                    pk.add(pk.realize(hit[1], first), i, w, L / first[0])
                    room[first] = pk.top_room(first)
                    break
                room[first] = pk.top_room(first)
            for cls in sorted(classes, key=room.__getitem__, reverse=True):
                w = work_list[cls][j]
                if room[cls] < w:
                    continue
                hit = pk.best_for_fill(cls, w, L / cls[0], blocked)
                if hit is not None:
                    pk.add(pk.realize(hit[1], cls), i, w, L / cls[0])
                    room[cls] = pk.top_room(cls)
                    placed = True
                    break
                room[cls] = pk.top_room(cls)
            if placed:
                break
            # a new microbatch tall enough for the sequence on its first block, even on a slow rank
            pk.offer_free(pk.new_mb((overhead[fill] + float(shares[i])) * pk.slowest(0, fill[0])), fill)
            room[fill] = pk.top_room(fill)
    return Layout(pk.bins, pk.caps, pk.cursor, heavy_mbs, slowdown)
