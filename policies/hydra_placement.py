"""HyDra's placement: sequences with known degrees and shares → CP groups in microbatches, in sorted lists.

Every CP group is a *bin* with a load (s; its overhead plus the work of its sequences at its size and engine),
a token count per rank (≤ the memory budget M) and a capacity: (1 + tolerance) · τ, or (1 + tolerance) · h in a
microbatch of a heavy sequence of height h > τ. Bins of one (size, engine) form a *class* kept as a sorted list
of (load − capacity, bin) (most room first); a bin whose load changes leaves the list and re-enters at its new
place (two bisections and a memmove: the lists hold one class's bins), and a search walks the list from the
front without changing it. Microbatches sit in one more sorted list, by free ranks.

Heavy sequences first: each opens a group in microbatches of their own (first fit by free ranks, largest
degree first); a microbatch's capacity is (1 + tolerance) times its tallest heavy load.
Phase A — the structure (sequences above the smallest degree), largest degree first, then largest share:
join the roomiest group of the class if the load stays within τ (or h; no tolerance used yet), else carve a
new group from the microbatch with the most free ranks, else join a group within the tolerance, else open a
microbatch. Microbatches are carved left to right in non-increasing sizes, so power-of-two groups land on
aligned blocks (and groups of ≤ G/t ranks stay inside a node).
Phase B — the fill (sequences of the smallest degree, largest share first, i.e. LPT; ``_fill``): every free
block of the fill class in every microbatch is a bin of the fill class's overhead and no tokens, next to
phase A's bins. Bins sit in one max-heap of room per class (each bin in exactly one heap: an update is one
``heapreplace``, no entry goes stale); each sequence takes the roomiest top over the classes it may use (its
work re-priced at that class's size and engine: a short document may ride in the spare capacity of a long
sequence's group), provided load and tokens fit. A top that fails only the token check waits in a heap
keyed by the longest sequence it can still take and returns when a short enough one comes (a bin that the next
sequence could not join by tokens goes there as soon as it takes a sequence); a sequence that fits nowhere
opens a microbatch. Other classes are ranked by the grid's power-law estimate of the work (no
pricing per candidate) and what lands there is priced exactly at the end, in one call. Used free blocks
become groups; the result is a :class:`Layout` of arrays.

Cost: O((n + m) log n) heap and bisection steps for n sequences and m microbatches (bins exist only where
sequences are; a search looks at most ``PROBES`` bins, or ``PROBES`` + 2 · short microbatches), times the
classes visited (usually one; at most log2 W + 2 sizes × engines); no step scans the pool.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dcpsim.policies.hydra_target import pack_heavy

PROBES = 8  # bins set aside per class and sequence when only the token budget fails


@dataclass(slots=True)
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


@dataclass(frozen=True)
class Layout:
    """The placed groups (arrays over groups), each sequence's group, and each microbatch's capacity."""

    mb: np.ndarray  # [G] microbatch (placement key) of each group
    first: np.ndarray  # [G] its first rank
    size: np.ndarray  # [G] its degree
    u: np.ndarray  # [G] inner Ulysses degree of its planning engine
    load: np.ndarray  # [G] its load (s): overhead + its sequences' work at (size, u)
    seq_group: np.ndarray  # [n] group of each batch position
    placed: np.ndarray  # [n] batch positions in placement order (a group lists its sequences in this order)
    caps: list[float]  # capacity of each microbatch
    heavy_mbs: int  # microbatches 0 .. heavy_mbs − 1 hold the heavy sequences
    slow: np.ndarray | None = None  # [W] the pool ranks' slow-down factors placement weighted by (None: none)

    def members(self) -> list[list[int]]:
        """Batch positions of every group's sequences, in placement order."""
        out: list[list[int]] = [[] for _ in range(len(self.mb))]
        for i, g in zip(self.placed.tolist(), self.seq_group[self.placed].tolist()):
            out[g].append(i)
        return out


class _Packer:
    def __init__(self, pool: int, budget: float, tau: float, tol: float, aligned: bool,
                 overhead: dict[tuple[int, int], float], slow: np.ndarray | None = None) -> None:
        self.W, self.M, self.tau, self.tol, self.aligned = pool, budget, tau, tol, aligned
        self.overhead = overhead
        self.slow = slow  # [W] each pool rank's slow-down factor (stragglers); None: every rank at full speed
        self.bins: list[Bin] = []
        self.caps: list[float] = []
        self.cursor: list[int] = []
        # per class (size, u) its bins as sorted (load − capacity, bin): most room first
        self.classes: dict[tuple[int, int], list[tuple[float, int]]] = {}
        self.free: list[tuple[int, float, int]] = []  # sorted (−free ranks, −cap, mb): most free ranks first
        self.short = 0  # microbatches below τ (a height profile's ramps)

    # ---- microbatches and bins ----------------------------------------------------------------------
    def new_mb(self, height: float = 0.0, exact: bool = False) -> int:
        """A new microbatch of capacity (1 + tol) · max(τ, height), or (1 + tol) · height if ``exact``."""
        k = len(self.caps)
        self.caps.append((1.0 + self.tol) * (height if exact else max(self.tau, height)))
        self.cursor.append(0)
        insort(self.free, (-self.W, -self.caps[k], k))
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

    def carve(self, k: int, size: int, u: int, pos: int = -1, work: float = 0.0, tokens: float = 0.0) -> Bin:
        """A new group of ``size`` ranks at microbatch k's cursor; with ``pos`` ≥ 0, holding that sequence."""
        c0 = self.cursor[k]
        cap = self.caps[k] if self.slow is None else self.block_cap(k, c0, size)
        ovh = self.overhead[size, u]
        b = (Bin(k, c0, size, u, cap, ovh + work, 0.0 + tokens, [pos]) if pos >= 0
             else Bin(k, c0, size, u, cap, ovh))
        free = self.free
        del free[bisect_left(free, (c0 - self.W, -self.caps[k], k))]
        insort(free, (size + c0 - self.W, -self.caps[k], k))
        self.cursor[k] = c0 + size
        self.bins.append(b)
        insort(self.classes.setdefault((size, u), []), (b.load - b.cap, len(self.bins) - 1))
        return b

    def add(self, gid: int, pos: int, work: float, tokens: float) -> None:
        b = self.bins[gid]
        entries = self.classes[b.size, b.u]
        del entries[bisect_left(entries, (b.load - b.cap, gid))]
        b.seqs.append(pos)
        b.load += work
        b.tokens += tokens
        insort(entries, (b.load - b.cap, gid))

    def roomiest_mb(self, size: int, load: float = 0.0) -> int | None:
        """The microbatch with the most free ranks that can carve ``size`` and whose height (capacity without
        the tolerance) holds ``load`` (short microbatches of a height profile are passed over: at most
        ``PROBES`` + 2 · their number are looked at)."""
        limit = PROBES + 2 * self.short
        for n, (nf, _ncap, k) in enumerate(self.free):
            if n >= limit or -nf < size:
                return None
            if self.fits_block(k, size) and (not self.short
                                             or load <= self.caps[k] / (1.0 + self.tol) * (1 + 1e-12)):
                return k
        return None

    def best_in_class(self, cls: tuple[int, int], work: float, tokens: float,
                      strict: bool) -> tuple[float, int] | None:
        """(room after placing, bin id) of the roomiest bin of class ``cls`` = (size, u) that takes ``work`` and
        ``tokens`` within its capacity (capacity / (1 + tol), i.e. τ or h, if ``strict``): the bins in order of
        room, passing over at most ``PROBES`` that lack only the tokens."""
        lim = self.M * (1 + 1e-12)
        for n, (_key, gid) in enumerate(self.classes.get(cls, ())):
            if n >= PROBES:
                return None
            b = self.bins[gid]
            cap = b.cap / (1.0 + self.tol) if strict else b.cap
            if b.load + work > cap:
                return None  # the roomiest bin of the class cannot take it: none can
            if b.tokens + tokens <= lim:
                return b.load + work - cap, gid
        return None


def place(*, pool: int, budget: float, tau: float, tol: float, aligned: bool, lengths: np.ndarray,
          sizes: np.ndarray, ulysses: np.ndarray, shares: np.ndarray, heavy: np.ndarray, m_light: int,
          order_key: np.ndarray, overhead: dict[tuple[int, int], float], fill: tuple[int, int],
          slowdown: np.ndarray | None = None,
          fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
          fill_lower: Callable[[np.ndarray, int, int], np.ndarray | None] | None = None,
          fill_estimate: Callable[[np.ndarray, int, int], np.ndarray | None] | None = None,
          light_heights: np.ndarray | None = None,
          prune: Callable[[list[int], list[float], list[float], int], bool] | None = None) -> Layout | None:
    """Place every sequence (positions 0..n−1).

    ``sizes``, ``ulysses``, ``shares``: each sequence's degree, planning engine and per-rank work there;
    ``heavy``: set apart; ``order_key``: tie-break (the sequence ids); ``overhead[(size, u)]``: a group's fixed
    load; ``slowdown`` ([W] or None): each pool rank's slow-down factor, dividing the capacity of its groups; ``fill`` = (size, u) of the fill class (the smallest degree); ``fill_work(positions, sizes, u)`` (elementwise)
    prices fill sequences in another class, ``fill_lower`` (optional) a lower bound of that price (or None); ``light_heights``: the target height of each light microbatch in
    run order (None: τ for all ``m_light``); those below τ take only fill sequences (phase B); ``prune``
    (optional): called once phase A is placed with each group's microbatch and load, the microbatches'
    capacities and the heavy microbatch count; if it returns True, placement stops and returns None."""
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
        pk.carve(k, int(sizes[i]), int(ulysses[i]), i, float(shares[i]), float(tok[i]))
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
    for i, c, u, w, t in zip(big.tolist(), sizes[big].tolist(), ulysses[big].tolist(), shares[big].tolist(),
                             tok[big].tolist()):
        hit = pk.best_in_class((c, u), w, t, strict=True)
        if hit is None:
            k = pk.roomiest_mb(c, pk.overhead[c, u] + w)
            if k is None:
                hit = pk.best_in_class((c, u), w, t, strict=False)
                if hit is None:
                    k = pk.new_mb()
            if hit is None:
                pk.carve(k, c, u, i, w, t)
                continue
        pk.add(hit[1], i, w, t)
    # A caller comparing layouts may stop here: prune(group microbatches, group loads, microbatch capacities,
    # heavy microbatches) sees the groups before the fill, which only adds load to them.
    if prune is not None and prune([b.mb for b in pk.bins], [b.load for b in pk.bins], pk.caps, heavy_mbs):
        return None
    # Phase B: the fill, vectorised (_fill).
    small = np.flatnonzero(is_fill)
    small = small[np.lexsort((order_key[small], -shares[small]))]
    return _fill(pk, heavy_mbs, small, lengths, shares, fill, fill_work, fill_lower, slowdown, fill_estimate)


def _blocks(pk: _Packer, k: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """First ranks and capacities of microbatch k's free blocks of ``size`` ranks (aligned when carving is)."""
    c0 = pk.cursor[k]
    if not pk.fits_block(k, size):
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    first = np.arange(c0, pk.W - size + 1, size, dtype=np.int64)
    if pk.slow is None:
        return first, np.full(len(first), pk.caps[k])
    return first, pk.caps[k] / pk.slow[first[:, None] + np.arange(size)].max(axis=1)


def _fill(pk: _Packer, heavy_mbs: int, small: np.ndarray, lengths: np.ndarray, shares: np.ndarray,
          fill: tuple[int, int], fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
          fill_lower: Callable[[np.ndarray, int, int], np.ndarray | None] | None,
          slow: np.ndarray | None,
          fill_estimate: Callable[[np.ndarray, int, int], np.ndarray | None] | None = None) -> Layout:
    """Phase B: LPT of the fill sequences ``small`` (largest share first) over every bin of phase A and every
    free block of the fill class (module docstring).

    Free blocks are bins of zero tokens and the fill class's overhead; those that receive a sequence become
    groups. Each sequence goes to the roomiest bin that takes it (its work at the bin's class, its tokens) over
    the classes it may use; a sequence that fits nowhere opens a microbatch. Returns the :class:`Layout` of
    phase A's bins and the used blocks."""
    cf, uf = fill
    lim = pk.M * (1 + 1e-12)
    bins = pk.bins
    classes = sorted({(b.size, b.u) for b in bins} | {fill})
    ci = {c: i for i, c in enumerate(classes)}
    nb0 = len(bins)
    mb = [b.mb for b in bins]
    first = [b.first for b in bins]
    cap = [b.cap for b in bins]
    load = [b.load for b in bins]
    tok = [b.tokens for b in bins]
    cls = [ci[b.size, b.u] for b in bins]
    for k in range(len(pk.caps)):  # every microbatch's free blocks
        f, c = _blocks(pk, k, cf)
        mb += [k] * len(f)
        first += f.tolist()
        cap += c.tolist()
    nfree = len(mb) - nb0
    ovh_f = pk.overhead[fill]
    mb_a = np.asarray(mb, dtype=np.int64)
    first_a = np.asarray(first, dtype=np.int64)
    cap_a = np.asarray(cap, dtype=np.float64)
    load_a = np.r_[np.asarray(load, dtype=np.float64), np.full(nfree, ovh_f)]
    tok_a = np.r_[np.asarray(tok, dtype=np.float64), np.zeros(nfree)]
    cls_a = np.r_[np.asarray(cls, dtype=np.int64), np.full(nfree, ci[fill], dtype=np.int64)]
    csize = np.asarray([c for c, _ in classes], dtype=np.float64)

    ns = len(small)
    L = lengths[small].astype(np.float64)
    # Work of every fill sequence at every class ([classes, ns]). Another class's rooms only shrink in phase B
    # (only fill blocks are added), so a sequence whose work exceeds the class's largest room now never goes
    # there (inf). Other classes are ranked with ``fill_estimate`` (the grid's power law, no pricing) where
    # it has one; what lands there is priced exactly at the end. Without an estimate, priced now in one call.
    work = np.full((len(classes), ns), np.inf)
    work[ci[fill]] = shares[small]
    room0 = cap_a - load_a
    ask = []
    for cls_, j in ci.items():
        if cls_ == fill or not ns:
            continue
        top = float(room0[cls_a == j].max())
        est = fill_estimate(small, *cls_) if fill_estimate is not None else None
        if est is not None:
            work[j] = np.where(est <= top, est, np.inf)
            continue
        lower = fill_lower(small, *cls_) if fill_lower is not None else None
        ask.append((j, cls_, np.arange(ns) if lower is None else np.flatnonzero(lower <= top)))
    if ask:
        priced = fill_work(np.concatenate([small[m] for _, _, m in ask]),
                           np.concatenate([np.full(len(m), c[0]) for _, c, m in ask]),
                           np.concatenate([np.full(len(m), c[1]) for _, c, m in ask]))
        a = 0
        for j, _, m in ask:
            work[j, m] = priced[a:a + len(m)]
            a += len(m)

    # LPT: one max-heap of room per class (every bin in exactly one heap, so a bin's update is one
    # heapreplace and no entry goes stale); each sequence takes the roomiest top over the classes that fit it.
    # A top that fails only the token budget waits in ``blocked`` (keyed by the longest sequence it can still
    # take) and returns to its heap once a short enough sequence comes.
    mb_l, first_l, cls_l = mb_a.tolist(), first_a.tolist(), cls_a.tolist()
    cap_l = cap_a.tolist()
    load_l, tok_l = load_a.tolist(), tok_a.tolist()
    csz = [float(c) for c, _ in classes]
    nc = len(classes)
    # each class's bins sorted by (key, bin): a sorted list is a heap, and (key, bin) pairs are unique, so the
    # heap's tops come in the same order however it is laid out
    keys_a = load_a - cap_a
    by = np.lexsort((np.arange(len(keys_a)), keys_a, cls_a))
    cut = np.searchsorted(cls_a[by], np.arange(nc + 1)).tolist()
    pairs = list(zip(keys_a[by].tolist(), by.tolist()))
    heaps: list[list[tuple[float, int]]] = [pairs[cut[c]:cut[c + 1]] for c in range(nc)]
    work_l = work.tolist()
    L_l = L.tolist()
    where_l = [-1] * ns
    blocked: list[tuple[float, int]] = []  # (−longest sequence it can take, bin)
    lim_ = lim
    fc = ci[fill]
    # the classes each sequence can go to at all (priced: not screened out above), as a tuple per sequence
    mask = (np.isfinite(work) << np.arange(nc)[:, None]).sum(axis=0).tolist() if ns else []
    tuples = {m: tuple(c for c in range(nc) if m >> c & 1) for m in set(mask)}
    cands = [tuples[m] for m in mask]

    inf = float("inf")
    tops = [h[0][0] if h else inf for h in heaps]  # each class heap's top key (inf: empty), kept in step
    L_next = L_l[1:] + [0.0]  # the next sequence's length (fill sequences come longest first)

    def put(j: int, cand: tuple[int, ...]) -> None:
        """Sequence j into the roomiest bin that takes it among the classes ``cand`` (LPT's step)."""
        Lj = L_l[j]
        while blocked and -blocked[0][0] >= Lj:
            g = heapq.heappop(blocked)[1]
            c = cls_l[g]
            heapq.heappush(heaps[c], (load_l[g] - cap_l[g], g))
            tops[c] = heaps[c][0][0]
        skip = 0  # classes ruled out for this sequence (bit mask)
        while True:
            best, bc = 1.0, -1  # most room = most negative key
            for c in cand:
                if tops[c] < best and not skip >> c & 1:
                    best, bc = tops[c], c
            if bc < 0:  # fits nowhere: a new microbatch, tall enough for it on its first block even if slow
                k = pk.new_mb((ovh_f + work_l[fc][j]) * pk.slowest(0, cf))
                f, c_ = _blocks(pk, k, cf)
                h = heaps[fc]
                for fr, cp in zip(f.tolist(), c_.tolist()):
                    g = len(mb_l)
                    mb_l.append(k)
                    first_l.append(fr)
                    cls_l.append(fc)
                    cap_l.append(cp)
                    load_l.append(ovh_f)
                    tok_l.append(0.0)
                    heapq.heappush(h, (ovh_f - cp, g))
                tops[fc] = h[0][0] if h else inf
                skip = 0
                continue
            w = work_l[bc][j]
            if best + w > 0.0:  # the roomiest bin of this class cannot take it: none of the class can
                skip |= 1 << bc
                continue
            h = heaps[bc]
            g = h[0][1]
            t = Lj / csz[bc]
            if tok_l[g] + t > lim_:
                heapq.heappop(h)
                tops[bc] = h[0][0] if h else inf
                heapq.heappush(blocked, (-(lim_ - tok_l[g]) * csz[bc], g))
                continue
            load_l[g] += w
            tok = tok_l[g] = tok_l[g] + t
            if tok + L_next[j] / csz[bc] > lim_:  # the next (longest remaining) sequence cannot join: blocked
                heapq.heappop(h)  # now, where it would go when it next reached the top
                heapq.heappush(blocked, (-(lim_ - tok) * csz[bc], g))
            else:
                heapq.heapreplace(h, (load_l[g] - cap_l[g], g))
            tops[bc] = h[0][0] if h else inf
            where_l[j] = g
            return

    for j in range(ns):
        put(j, cands[j])
    if fill_estimate is not None and ns:
        # The estimated work in other classes' groups, priced exactly now. The estimate is a chord of the
        # work in log-log, above the work where that is log-log convex (a sum of powers of L: GEMMs,
        # attention); where it fell short and a group ends above its capacity, the group gives its fill
        # sequences back and they go to fill-class bins (none did on the shipped scenarios).
        where = np.asarray(where_l, dtype=np.int64)
        cls_w = np.asarray(cls_l, dtype=np.int64)[where]
        other_a = np.flatnonzero(cls_w != fc)
        if other_a.size:
            oc = cls_w[other_a]
            exact = fill_work(small[other_a], csize[oc].astype(np.int64),
                              np.asarray([u for _, u in classes], dtype=np.int64)[oc])
            loads = np.asarray(load_l, dtype=np.float64)
            np.add.at(loads, where[other_a], exact - work[oc, other_a])  # in sequence order, as one by one
            load_l = loads.tolist()
            g_o = where[other_a]
            back_a = other_a[(loads > np.asarray(cap_l) * (1 + 1e-12))[g_o]]
            back = back_a.tolist()
            if back:  # some group is over (rare): its sequences leave at their exact work
                for j, x in zip(other_a.tolist(), exact.tolist()):
                    work_l[cls_l[where_l[j]]][j] = x
            for j in back:
                g, c = where_l[j], cls_l[where_l[j]]
                load_l[g] -= work_l[c][j]
                tok_l[g] -= L_l[j] / csz[c]
                where_l[j] = -1
            for j in back:
                put(j, (fc,))
    mb_a, first_a = np.asarray(mb_l, dtype=np.int64), np.asarray(first_l, dtype=np.int64)
    load_a = np.asarray(load_l, dtype=np.float64)
    where = np.asarray(where_l, dtype=np.int64)
    # groups: phase A's bins, then every free block that took a sequence
    used = np.unique(where[where >= nb0])
    gid = np.full(len(mb_a), -1, dtype=np.int64)
    gid[:nb0] = np.arange(nb0)
    gid[used] = nb0 + np.arange(len(used))
    keep = np.r_[np.arange(nb0), used].astype(np.int64)
    n = len(lengths)
    seq_group = np.full(n, -1, dtype=np.int64)
    a_pos = [i for bn in bins for i in bn.seqs]
    a_grp = [g for g, bn in enumerate(bins) for _ in bn.seqs]
    seq_group[np.asarray(a_pos, dtype=np.int64)] = np.asarray(a_grp, dtype=np.int64)
    seq_group[small] = gid[where]
    placed = np.r_[np.asarray(a_pos, dtype=np.int64), small]  # placement order
    return Layout(mb=mb_a[keep], first=first_a[keep],
                  size=np.r_[np.asarray([bn.size for bn in bins], dtype=np.int64), np.full(len(used), cf)],
                  u=np.r_[np.asarray([bn.u for bn in bins], dtype=np.int64), np.full(len(used), uf)],
                  load=load_a[keep], seq_group=seq_group, placed=placed, caps=list(pk.caps),
                  heavy_mbs=heavy_mbs, slow=slow)

