"""HyDra's fill (phase B of :func:`policies.hydra.placement.place`): the smallest degree's sequences, LPT.

The fill sequences come largest share first (LPT). Every free block of the fill class in every microbatch is a
bin with the fill class's overhead and no tokens, next to phase A's bins. Each sequence takes the roomiest bin
over the classes it may use (its work at that class's size and engine: a short document may ride in the spare
capacity of a long sequence's group), provided load and tokens fit; a sequence that fits nowhere opens a
microbatch.

The bins of each class sit in a binary heap (``heapq``) of (load − capacity, bin): most room first; every bin
is in exactly one heap, so an update is one ``heapreplace``. A top that fails only the token budget waits in a
heap keyed by the longest sequence it can still take, and returns when a short enough one comes (a bin that
the next sequence could not join by tokens goes there as soon as it takes a sequence). Other classes than the
fill class are ranked by the grid's power-law estimate of the work (no pricing per candidate); what lands
there is priced exactly at the end, in one call.

Cost: O((n + m) log B) heap operations for n sequences, m microbatches and B bins, times the classes a
sequence may use.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from dcpsim.policies.hydra.placement import Packer


class Filled(NamedTuple):
    """Every bin after the fill (phase A's bins, then every free block of the fill class) and where each fill
    sequence went."""

    mb: np.ndarray  # [B] microbatch of each bin
    first: np.ndarray  # [B] its first rank
    load: np.ndarray  # [B] its load (s)
    where: np.ndarray  # [n_fill] bin of each fill sequence, in the order of ``small``


def fill(pk: Packer, small: np.ndarray, lengths: np.ndarray, shares: np.ndarray, fill: tuple[int, int],
         fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
         fill_estimate: Callable[[np.ndarray, int, int], np.ndarray | None]) -> Filled:
    """Phase B: LPT of the fill sequences ``small`` (largest share first) over every bin of phase A and every
    free block of the fill class (module docstring). ``fill_work(positions, sizes, u)`` prices exactly,
    ``fill_estimate(positions, size, u)`` estimates (None: no estimate, priced exactly now).

    Returns every bin's microbatch, first rank and load (phase A's bins first, then the free blocks, then
    those of microbatches the fill opened) and each fill sequence's bin."""
    cf = fill[0]
    lim = pk.M * (1 + 1e-12)
    bins = pk.bins
    classes = sorted({(b.size, b.u) for b in bins} | {fill})
    ci = {c: i for i, c in enumerate(classes)}
    fc, nc = ci[fill], len(classes)
    free = [(k, *pk.free_blocks(k, cf)) for k in range(len(pk.caps))]  # every microbatch's free blocks
    ovh_f = pk.overhead[fill]
    mb_l = [b.mb for b in bins] + [k for k, f, _ in free for _ in range(len(f))]
    first_l = [b.first for b in bins] + [x for _, f, _ in free for x in f.tolist()]
    cap_l = [b.cap for b in bins] + [x for _, _, c in free for x in c.tolist()]
    nfree = len(mb_l) - len(bins)
    load_l = [b.load for b in bins] + [ovh_f] * nfree
    tok_l = [b.tokens for b in bins] + [0.0] * nfree
    cls_l = [ci[b.size, b.u] for b in bins] + [fc] * nfree
    csz = [float(c) for c, _ in classes]

    ns = len(small)
    # Work of every fill sequence at every class ([classes, ns]). Another class's rooms only shrink in phase B
    # (only fill blocks are added), so a sequence whose work exceeds the class's largest room now never goes
    # there (inf).
    work = np.full((nc, ns), np.inf)
    work[fc] = shares[small]
    top = [-np.inf] * nc  # each class's largest room now
    for c, cap, load in zip(cls_l, cap_l, load_l):
        top[c] = max(top[c], cap - load)
    for cls, j in ci.items():
        if j != fc and ns:
            est = fill_estimate(small, *cls)
            row = fill_work(small, np.full(ns, cls[0]), np.full(ns, cls[1])) if est is None else est
            work[j] = np.where(row <= top[j], row, np.inf)
    work_l = work.tolist()
    L_l = lengths[small].astype(np.float64).tolist() + [0.0]  # (and 0 after the last: "the next sequence")
    where_l = [-1] * ns
    inf = float("inf")
    heaps: list[list[tuple[float, int]]] = [[] for _ in range(nc)]  # per class (load − capacity, bin)
    for g, c in enumerate(cls_l):
        heaps[c].append((load_l[g] - cap_l[g], g))
    for h in heaps:
        heapq.heapify(h)
    tops = [h[0][0] if h else inf for h in heaps]
    blocked: list[tuple[float, int]] = []  # (−longest sequence it can take, bin)

    def put(js: list[int], cands: list[list[int]]) -> None:
        """Each sequence of ``js`` in turn into the roomiest bin that takes it among its classes ``cands``
        (LPT's step)."""
        for j, cand in zip(js, cands):
            Lj = L_l[j]
            while blocked and -blocked[0][0] >= Lj:  # bins that can take Lj again return to their heaps
                g = heapq.heappop(blocked)[1]
                c = cls_l[g]
                heapq.heappush(heaps[c], (load_l[g] - cap_l[g], g))
                tops[c] = heaps[c][0][0]
            skip = 0  # classes ruled out for this sequence (bit mask)
            while True:
                best, bc = 1.0, -1  # most room = most negative key (the first class on ties)
                if skip == 0 and len(cand) == nc:  # every class open to it: the least top
                    low = min(tops)
                    if low < 1.0:
                        best, bc = low, tops.index(low)
                else:
                    for c in cand:
                        if tops[c] < best and not skip >> c & 1:
                            best, bc = tops[c], c
                if bc < 0:  # fits nowhere: a new microbatch, tall enough for it on its first block even if slow
                    k = pk.new_mb((ovh_f + work_l[fc][j]) * pk.slowest(0, cf))
                    f, c_ = pk.free_blocks(k, cf)
                    for fr, cp in zip(f.tolist(), c_.tolist()):
                        heapq.heappush(heaps[fc], (ovh_f - cp, len(cls_l)))
                        mb_l.append(k)
                        first_l.append(fr)
                        cls_l.append(fc)
                        cap_l.append(cp)
                        load_l.append(ovh_f)
                        tok_l.append(0.0)
                    tops[fc] = heaps[fc][0][0] if heaps[fc] else inf
                    skip = 0
                    continue
                w = work_l[bc][j]
                if best + w > 0.0:  # the roomiest bin of this class cannot take it: none of the class can
                    skip |= 1 << bc
                    continue
                h = heaps[bc]
                g = h[0][1]
                t = Lj / csz[bc]
                if tok_l[g] + t > lim:  # only the tokens fail: the bin waits for a shorter sequence
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
                break

    # the classes each sequence may use at all (finite work), one list per distinct set
    mask = (np.isfinite(work) << np.arange(nc)[:, None]).sum(axis=0).tolist()
    cands = {m: [c for c in range(nc) if m >> c & 1] for m in set(mask)}
    put(list(range(ns)), [cands[m] for m in mask])
    where = np.asarray(where_l, dtype=np.int64)
    loads = np.asarray(load_l, dtype=np.float64)
    # The estimated work in other classes' groups, priced exactly now. The estimate is a chord of the work in
    # log-log, above the work where that is log-log convex (a sum of powers of L: GEMMs, attention); where it
    # fell short and a group ends above its capacity, the group gives its fill sequences back and they go to
    # fill-class bins (none did on the shipped scenarios).
    cls_w = np.asarray(cls_l, dtype=np.int64)[where]
    other = np.flatnonzero(cls_w != fc)
    if other.size:
        oc = cls_w[other]
        exact = fill_work(small[other], np.asarray(csz, dtype=np.int64)[oc],
                          np.asarray([u for _, u in classes], dtype=np.int64)[oc])
        np.add.at(loads, where[other], exact - work[oc, other])  # in sequence order, as one by one
        back = other[(loads > np.asarray(cap_l) * (1 + 1e-12))[where[other]]].tolist()
        if back:  # some group is over (rare): its sequences leave at their exact work
            load_l = loads.tolist()
            for j, x in zip(other.tolist(), exact.tolist()):
                work_l[cls_l[where_l[j]]][j] = x
            for j in back:
                g, c = where_l[j], cls_l[where_l[j]]
                load_l[g] -= work_l[c][j]
                tok_l[g] -= L_l[j] / csz[c]
                where_l[j] = -1
            put(back, [[fc]] * len(back))
            where, loads = np.asarray(where_l, dtype=np.int64), np.asarray(load_l, dtype=np.float64)
    return Filled(np.asarray(mb_l, dtype=np.int64), np.asarray(first_l, dtype=np.int64), loads, where)
