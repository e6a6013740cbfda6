"""HyDra's fill (phase B of :func:`policies.hydra_placement.place`): the smallest degree's sequences, LPT.

Sequences of the smallest degree, largest share first (LPT): every free block of the fill class in every
microbatch is a bin of the fill class's overhead and no tokens, next to phase A's bins
(:mod:`policies.hydra_bins`). Each sequence takes the roomiest bin over the classes it may use (its work
re-priced at that class's size and engine: a short document may ride in the spare capacity of a long sequence's
group), provided load and tokens fit. The bins sit first in one heap of room over every class (global mode: the
same pick, one heap step per sequence; a microbatch's untaken free blocks one entry until they are taken) and,
from the first sequence that needs more (a class ruled out for it, a
class to pass over, a new microbatch), in one max-heap of room per class (each bin in exactly one heap: an
update is one ``heapreplace``, no entry goes stale). A top that fails only the token check waits in a heap keyed by
the longest sequence it can still take and returns when a short enough one comes (a bin that the next sequence
could not join by tokens goes there as soon as it takes a sequence); a sequence that fits nowhere opens a
microbatch. Other classes are ranked by the grid's power-law estimate of the work (no pricing per candidate)
and what lands there is priced exactly at the end, in one call.

Cost: O((n + m) log B) heap operations for n sequences, m microbatches and B bins, times the classes a sequence
may use (screened once by the estimate; at most log2 W + 2 sizes × engines).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import islice, repeat
from typing import NamedTuple

import numpy as np

from dcpsim.policies.hydra.bins import Packer


class Filled(NamedTuple):
    """Every bin after the fill (phase A's bins, then every free block of the fill class) and where each fill
    sequence went."""

    mb: np.ndarray  # [B] microbatch of each bin
    first: np.ndarray  # [B] its first rank
    load: np.ndarray  # [B] its load (s)
    where: np.ndarray  # [n_fill] bin of each fill sequence, in the order of ``small``
    n_global: int = 0  # fill sequences the global heap placed before the class loop took over (all: none did)


def fill(pk: Packer, small: np.ndarray, lengths: np.ndarray, shares: np.ndarray, fill: tuple[int, int],
         fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
         fill_lower: Callable[[np.ndarray, int, int], np.ndarray | None] | None,
         fill_estimate: Callable[[np.ndarray, int, int], np.ndarray | None] | None = None, *,
         global_first: bool = True) -> Filled:
    """Phase B: LPT of the fill sequences ``small`` (largest share first) over every bin of phase A and every
    free block of the fill class (module docstring).

    Free blocks are bins of zero tokens and the fill class's overhead; those that receive a sequence become
    groups. Each sequence goes to the roomiest bin that takes it (its work at the bin's class, its tokens) over
    the classes it may use; a sequence that fits nowhere opens a microbatch (in ``pk``). Returns every bin's
    microbatch, first rank and load (phase A's bins first, then the free blocks) and each fill sequence's bin.
    ``global_first=False``: the class loop from the first sequence (the same result; the tests' reference)."""
    cf = fill[0]
    lim = pk.M * (1 + 1e-12)
    bins = pk.bins
    classes = sorted({(b.size, b.u) for b in bins} | {fill})
    ci = {c: i for i, c in enumerate(classes)}
    load = [b.load for b in bins]
    tok = [b.tokens for b in bins]
    cls = [ci[b.size, b.u] for b in bins]
    f_mb, f_first, f_cap = pk.all_free_blocks(cf)  # every microbatch's free blocks
    nfree = len(f_mb)
    ovh_f = pk.overhead[fill]
    mb_a = np.concatenate([np.asarray([b.mb for b in bins], dtype=np.int64), f_mb])
    first_a = np.concatenate([np.asarray([b.first for b in bins], dtype=np.int64), f_first])
    cap_a = np.concatenate([np.asarray([b.cap for b in bins], dtype=np.float64), f_cap])
    load_a = np.concatenate([np.asarray(load, dtype=np.float64), np.full(nfree, ovh_f)])
    cls_a = np.concatenate([np.asarray(cls, dtype=np.int64), np.full(nfree, ci[fill], dtype=np.int64)])
    csize = np.asarray([c for c, _ in classes], dtype=np.float64)

    ns = len(small)
    L = lengths[small].astype(np.float64)
    # Work of every fill sequence at every class ([classes, ns]). Another class's rooms only shrink in phase B
    # (only fill blocks are added), so a sequence whose work exceeds the class's largest room now never goes
    # there (inf). Other classes are ranked with ``fill_estimate`` (the grid's power law, no pricing) where
    # it has one; what lands there is priced exactly at the end. Without an estimate, priced now in one call.
    work = np.full((len(classes), ns), np.inf)
    work[ci[fill]] = shares[small]
    top = np.full(len(classes), -np.inf)  # each class's largest room now
    np.maximum.at(top, cls_a, cap_a - load_a)
    ask, estimated = [], []
    for cls_, j in ci.items():
        if cls_ == fill or not ns:
            continue
        est = fill_estimate(small, *cls_) if fill_estimate is not None else None
        if est is not None:
            work[j] = est
            estimated.append(j)
            continue
        lower = fill_lower(small, *cls_) if fill_lower is not None else None
        ask.append((j, cls_, np.arange(ns) if lower is None else np.flatnonzero(lower <= top[j])))
    if estimated:
        rows = work[estimated]
        work[estimated] = np.where(rows <= top[estimated, None], rows, np.inf)
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
    cls_l = cls + [ci[fill]] * nfree  # (the free blocks' entries one shared value each until taken)
    new_mb: list[int] = []  # microbatch and first rank of the bins new microbatches add (after mb_a, first_a)
    new_first: list[int] = []
    cap_l = cap_a.tolist()
    load_l, tok_l = load + [ovh_f] * nfree, tok + [0.0] * nfree
    csz = [float(c) for c, _ in classes]
    nc = len(classes)
    keys_a = load_a - cap_a
    work_l = work.data  # [class, j] → a Python float on demand (no 9 × n list: each is read about once)
    L_l = L.tolist() + [0.0]  # (and 0 after the last: the length of "the next sequence")
    where_l = [-1] * ns
    blocked: list[tuple[float, int]] = []  # (−longest sequence it can take, bin)
    fc = ci[fill]
    # the classes each sequence can go to at all (priced: not screened out above): a bit mask per sequence,
    # and the tuple of classes of each mask
    every = (1 << nc) - 1  # (every class)
    finite = np.isfinite(work)
    # (None: every sequence may use every class; big lists are kept few, each one a young-generation
    # collection of the garbage collector walks)
    mask = None if finite.all() else (finite << np.arange(nc)[:, None]).sum(axis=0).tolist()
    tuples = {m: tuple(c for c in range(nc) if m >> c & 1) for m in ({every} if mask is None else set(mask))}

    inf = float("inf")
    # each class's heap of (key, bin) and its top key (inf: empty), kept in step (built by class_heaps() from the
    # global heap below when the class loop takes over)
    heaps: list[list[tuple[float, int]]] = [[] for _ in range(nc)]
    tops = [inf] * nc

    def masks(a: int):
        """The masks of sequences a, a + 1, …."""
        return repeat(every) if mask is None else islice(mask, a, None)

    def following(a: int):
        """The lengths of sequences a + 1, a + 2, …, then 0 (fill sequences come longest first)."""
        return islice(L_l, a + 1, None)

    def put(j: int, cand: tuple[int, ...], unblock: bool = True) -> None:
        """Sequence j into the roomiest bin that takes it among the classes ``cand`` (LPT's step);
        ``unblock=False``: the blocked bins that can take it have returned already."""
        Lj = L_l[j]
        while unblock and blocked and -blocked[0][0] >= Lj:
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
                k = pk.new_mb((ovh_f + work_l[fc, j]) * pk.slowest(0, cf))
                f, c_ = pk.free_blocks(k, cf)
                h = heaps[fc]
                for fr, cp in zip(f.tolist(), c_.tolist()):
                    g = len(cls_l)
                    new_mb.append(k)
                    new_first.append(fr)
                    cls_l.append(fc)
                    cap_l.append(cp)
                    load_l.append(ovh_f)
                    tok_l.append(0.0)
                    heapq.heappush(h, (ovh_f - cp, g))
                tops[fc] = h[0][0] if h else inf
                skip = 0
                continue
            w = work_l[bc, j]
            if best + w > 0.0:  # the roomiest bin of this class cannot take it: none of the class can
                skip |= 1 << bc
                continue
            h = heaps[bc]
            g = h[0][1]
            t = Lj / csz[bc]
            if tok_l[g] + t > lim:
                heapq.heappop(h)
                tops[bc] = h[0][0] if h else inf
                heapq.heappush(blocked, (-(lim - tok_l[g]) * csz[bc], g))
                continue
            load_l[g] += w
            tok = tok_l[g] = tok_l[g] + t
            if tok + L_l[j + 1] / csz[bc] > lim:  # the next (longest remaining) sequence cannot join: blocked
                heapq.heappop(h)  # now, where it would go when it next reached the top
                heapq.heappush(blocked, (-(lim - tok) * csz[bc], g))
            else:
                heapq.heapreplace(h, (load_l[g] - cap_l[g], g))
            tops[bc] = h[0][0] if h else inf
            where_l[j] = g
            return

    work_rows = [work[c].data for c in range(nc)]  # one 1-D view per class (rows of work: C-contiguous)
    heappop, heappush, heapreplace = heapq.heappop, heapq.heappush, heapq.heapreplace
    # Global mode, first: while every class is open to the sequences and the roomiest bin of all takes each
    # by load, one heap of (key, class, bin, last) over every class picks what the class tops would (the least
    # key, then the lowest class, then the lowest bin: one heap step per sequence, no scan of the tops). At
    # the first sequence that needs more (a class ruled out, a new microbatch) the class heaps are rebuilt
    # from it, put() places that sequence from the same state and the class loop below takes the rest.
    # A run of untaken free blocks (consecutive bins of one microbatch, one key) is one entry, its lowest bin
    # with ``last`` its last one (−1: a single bin): the heap of every block would take them lowest first,
    # wherever the run stands; a taken block leaves the run (its successor takes the entry's place: no other
    # entry lies between them) and enters the heap alone. The heap is the bins in use plus one entry per run.
    nb0 = len(load)
    runs = np.zeros(0, dtype=np.int64)
    if nfree:
        fk, fm = keys_a[nb0:], mb_a[nb0:]
        runs = nb0 + np.flatnonzero(np.concatenate([[True], (fm[1:] != fm[:-1]) | (fk[1:] != fk[:-1])]))
    heads = np.concatenate([np.arange(nb0, dtype=np.int64), runs])
    lasts = np.concatenate([np.full(nb0, -1, dtype=np.int64), runs[1:] - 1, [len(keys_a) - 1]]) if nfree \
        else np.full(nb0, -1, dtype=np.int64)
    gby = np.lexsort((heads, cls_a[heads], keys_a[heads]))
    G = list(zip(keys_a[heads[gby]].tolist(), cls_a[heads[gby]].tolist(), heads[gby].tolist(),
                 lasts[gby].tolist()))  # sorted: a heap

    def retry(j: int, Lj: float) -> tuple | None:
        """The global step from the same state where its first top fails: a top that fails only the tokens
        waits in ``blocked`` and the next is tried; None where a top fails the load or none is left (the class
        loop takes over)."""
        while G:
            best, bc, g, last = G[0]
            w = work_rows[bc][j]
            if best >= 1.0 or best + w > 0.0:
                return None
            cs = csz[bc]
            tok = tok_l[g] + Lj / cs
            if tok <= lim:
                return best, bc, g, last, w, cs, tok
            if last > g:
                G[0] = (best, bc, g + 1, last)
            else:
                heappop(G)
            heappush(blocked, (-(lim - tok_l[g]) * cs, g))
        return None

    start = ns if global_first else 0
    for j, Lj, Ln, mj in zip(range(ns if global_first else 0), L_l, following(0), masks(0)):
        while blocked and -blocked[0][0] >= Lj:
            g = heappop(blocked)[1]
            heappush(G, (load_l[g] - cap_l[g], cls_l[g], g, -1))
        if mj != every or not G:
            start = j
            break
        best, bc, g, last = G[0]  # the roomiest bin of all takes it by load and tokens (else retry)
        w = work_rows[bc][j]
        cs = csz[bc]
        tok = tok_l[g] + Lj / cs
        if best >= 1.0 or best + w > 0.0 or tok > lim:
            step = retry(j, Lj)
            if step is None:
                start = j
                break
            best, bc, g, last, w, cs, tok = step
        load_l[g] += w
        tok_l[g] = tok
        where_l[j] = g
        if last < 0:  # a bin in use
            if tok + Ln / cs > lim:
                heappop(G)
                heappush(blocked, (-(lim - tok) * cs, g))
            else:
                heapreplace(G, (load_l[g] - cap_l[g], bc, g, -1))
        else:  # a run's first block: it leaves the run
            if last > g:
                G[0] = (best, bc, g + 1, last)
            else:
                heappop(G)
            if tok + Ln / cs > lim:
                heappush(blocked, (-(lim - tok) * cs, g))
            else:
                heappush(G, (load_l[g] - cap_l[g], bc, g, -1))

    def class_heaps() -> None:
        """The class heaps and tops of the global heap's entries, each run's blocks one by one (sorted: each
        class's list is a heap, and (key, bin) pairs are unique, so its tops come in the same order however it
        is laid out)."""
        for h in heaps:
            h.clear()
        for key, c, g, last in sorted(G):
            if last < 0:
                heaps[c].append((key, g))
            else:
                heaps[c].extend([(key, b) for b in range(g, last + 1)])
        tops[:] = [h[0][0] if h else inf for h in heaps]

    n_global = start

    def filled(loads: np.ndarray, where: np.ndarray) -> Filled:
        """The result: every bin (those of new microbatches after the rest) with these loads and places."""
        return Filled(np.concatenate([mb_a, np.asarray(new_mb, dtype=np.int64)]),
                      np.concatenate([first_a, np.asarray(new_first, dtype=np.int64)]), loads, where, n_global)

    if start < ns:
        class_heaps()
        G.clear()
        if global_first:
            put(start, tuples[every if mask is None else mask[start]], unblock=False)
            start += 1
    # The class loop, its common step inline: the blocked bins that can take the sequence return (put()'s
    # first step, which then finds none), every class is open to it and the roomiest top takes it by load and
    # tokens; anything else goes through put(), which starts over from the same state.
    for j, Lj, Ln, mj in zip(range(start, ns), islice(L_l, start, None), following(start), masks(start)):
        while blocked and -blocked[0][0] >= Lj:  # put's first step: bins that can take Lj again return
            g = heappop(blocked)[1]
            c = cls_l[g]
            heappush(heaps[c], (load_l[g] - cap_l[g], g))
            tops[c] = heaps[c][0][0]
        best = min(tops)
        if mj != every or best >= 1.0:
            put(j, tuples[mj])
            continue
        bc = tops.index(best)
        w = work_rows[bc][j]
        h = heaps[bc]
        g = h[0][1]
        cs = csz[bc]
        tok = tok_l[g] + Lj / cs
        if best + w > 0.0 or tok > lim:
            put(j, tuples[mj])
            continue
        load_l[g] += w
        tok_l[g] = tok
        where_l[j] = g
        if tok + Ln / cs > lim:
            heappop(h)
            heappush(blocked, (-(lim - tok) * cs, g))
            tops[bc] = h[0][0] if h else inf
        else:
            heapreplace(h, (load_l[g] - cap_l[g], g))
            tops[bc] = h[0][0]
    if fill_estimate is not None and ns:
        # The estimated work in other classes' groups, priced exactly now. The estimate is a chord of the
        # work in log-log, above the work where that is log-log convex (a sum of powers of L: GEMMs,
        # attention); where it fell short and a group ends above its capacity, the group gives its fill
        # sequences back and they go to fill-class bins (none did on the shipped scenarios).
        where = np.asarray(where_l, dtype=np.int64)
        grown = len(cls_l) > len(cls_a)  # (new microbatches added bins: the lists hold them, the arrays not)
        cls_w = (np.asarray(cls_l, dtype=np.int64) if grown else cls_a)[where]
        other_a = np.flatnonzero(cls_w != fc)
        if other_a.size:
            oc = cls_w[other_a]
            exact = fill_work(small[other_a], csize[oc].astype(np.int64),
                              np.asarray([u for _, u in classes], dtype=np.int64)[oc])
            loads = np.asarray(load_l, dtype=np.float64)
            np.add.at(loads, where[other_a], exact - work[oc, other_a])  # in sequence order, as one by one
            g_o = where[other_a]
            back_a = other_a[(loads > (np.asarray(cap_l) if grown else cap_a) * (1 + 1e-12))[g_o]]
            back = back_a.tolist()
            if not back:  # (the common case: the arrays are the result)
                return filled(loads, where)
            load_l = loads.tolist()
            # some group is over (rare): its sequences leave at their exact work
            for j, x in zip(other_a.tolist(), exact.tolist()):
                work_l[cls_l[where_l[j]], j] = x
            for j in back:
                g, c = where_l[j], cls_l[where_l[j]]
                load_l[g] -= work_l[c, j]
                tok_l[g] -= L_l[j] / csz[c]
                where_l[j] = -1
            if G:  # (still in global mode: the class heaps first)
                class_heaps()
                G.clear()
            for j in back:
                put(j, (fc,))
    return filled(np.asarray(load_l, dtype=np.float64), np.asarray(where_l, dtype=np.int64))
