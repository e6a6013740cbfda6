"""HyDra's fill, phase B of :func:`policies.hydra.placement.place` (docs/hydra.md §6): the smallest degree's
sequences, largest share first (LPT), each into the roomiest bin that takes it over the classes it may use
(its work at that class's size and engine: a short document may ride in a long sequence's group), provided
load and tokens fit; one that fits nowhere opens a microbatch. Every free block of the fill class is a bin.

The bins of each class sit in a binary heap (``heapq``) of (load − capacity, bin); a top that fails only the
token budget waits in a heap keyed by the longest sequence it can still take. Other classes are ranked by the
grid's power-law estimate of the work and what lands there is priced exactly at the end, in one call.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.policies import hydra_kernels

if TYPE_CHECKING:
    from dcpsim.policies.hydra.placement import Packer


INF = float("inf")


class Fill:
    """The state of one fill: every bin as parallel lists ``mb``, ``first``, ``load``, … (phase A's, then the free
    blocks, then those of new microbatches), ``where`` each fill sequence went (in the order of ``small``), the
    work of every fill sequence at every class, and the class heaps."""

    def __init__(self, pk: Packer, small: np.ndarray, lengths: np.ndarray, shares: np.ndarray,
                 fill: tuple[int, int], fill_work: Callable, fill_estimate: Callable) -> None:
        self.pk, self.small, self.fill_work = pk, small, fill_work
        self.lim = pk.M * (1 + 1e-12)
        bins = pk.bins
        self.classes = sorted({(b.size, b.u) for b in bins} | {fill})
        ci = {c: i for i, c in enumerate(self.classes)}
        self.fc, self.nc, self.cf = ci[fill], len(self.classes), fill[0]
        free = [(k, *pk.free_blocks(k, fill[0])) for k in range(len(pk.caps))]  # every microbatch's free blocks
        self.ovh_f = pk.overhead[fill]
        self.mb = [b.mb for b in bins] + [k for k, f, _ in free for _ in range(len(f))]
        self.first = [b.first for b in bins] + [x for _, f, _ in free for x in f.tolist()]
        self.cap = [b.cap for b in bins] + [x for _, _, c in free for x in c.tolist()]
        nfree = len(self.mb) - len(bins)
        self.load = [b.load for b in bins] + [self.ovh_f] * nfree
        self.tok = [b.tokens for b in bins] + [0.0] * nfree
        self.cls = [ci[b.size, b.u] for b in bins] + [self.fc] * nfree
        self.csz = [float(c) for c, _ in self.classes]
        ns = len(small)
        # Work of every fill sequence at every class ([classes, ns]). Another class's rooms only shrink in phase
        # B (only fill blocks are added), so a sequence whose work exceeds the class's largest room now never
        # goes there (inf).
        self.work = np.full((self.nc, ns), np.inf)
        self.work[self.fc] = shares[small]
        top = np.full(self.nc, -np.inf)  # each class's largest room now
        np.maximum.at(top, np.asarray(self.cls, dtype=np.int64), np.subtract(self.cap, self.load))
        for cls, j in ci.items():
            if j != self.fc and ns:
                est = fill_estimate(small, *cls)
                row = fill_work(small, np.full(ns, cls[0]), np.full(ns, cls[1])) if est is None else est
                self.work[j] = np.where(row <= top[j], row, np.inf)
        self.work_l = self.work.tolist()
        self.L = lengths[small].astype(np.float64).tolist() + [0.0]  # (and 0 after the last: "the next one")
        self.where = [-1] * ns
        self.waits: np.ndarray | None = None  # the bins in the blocked heap after the compiled loop

    def heap_up(self, waits: np.ndarray) -> None:
        """Every bin into its class's heap, (load − capacity, bin), or where ``waits``, into the blocked heap,
        (−longest sequence it can take, bin); each class's top."""
        self.heaps: list[list[tuple[float, int]]] = [[] for _ in range(self.nc)]
        self.blocked: list[tuple[float, int]] = []
        for g, (c, cap, load, tok, w) in enumerate(zip(self.cls, self.cap, self.load, self.tok, waits.tolist())):
            if w:
                self.blocked.append((-(self.lim - tok) * self.csz[c], g))
            else:
                self.heaps[c].append((load - cap, g))
        for h in [*self.heaps, self.blocked]:
            heapq.heapify(h)
        self.tops = [h[0][0] if h else INF for h in self.heaps]

    def new_microbatch(self, j: int) -> None:
        """A new microbatch, tall enough for sequence j on its first block even if slow; its free blocks."""
        pk, fc = self.pk, self.fc
        k = pk.new_mb((self.ovh_f + self.work_l[fc][j]) * pk.slowest(0, self.cf))
        f, c_ = pk.free_blocks(k, self.cf)
        for fr, cp in zip(f.tolist(), c_.tolist()):
            heapq.heappush(self.heaps[fc], (self.ovh_f - cp, len(self.cls)))
            self.mb.append(k)
            self.first.append(fr)
            self.cls.append(fc)
            self.cap.append(cp)
            self.load.append(self.ovh_f)
            self.tok.append(0.0)
        self.tops[fc] = self.heaps[fc][0][0] if self.heaps[fc] else INF

    def put(self, js: list[int], cands: list[list[int]]) -> None:
        """Each sequence of ``js`` in turn into the roomiest bin that takes it among its classes ``cands``
        (LPT's step)."""
        heaps, tops, blocked, load, tok_l, cap, cls_l = (self.heaps, self.tops, self.blocked, self.load, self.tok,
                                                          self.cap, self.cls)
        lim, nc, csz, L, work_l = self.lim, self.nc, self.csz, self.L, self.work_l
        for j, cand in zip(js, cands):
            Lj = L[j]
            while blocked and -blocked[0][0] >= Lj:  # bins that can take Lj again return to their heaps
                g = heapq.heappop(blocked)[1]
                c = cls_l[g]
                heapq.heappush(heaps[c], (load[g] - cap[g], g))
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
                if bc < 0:  # fits nowhere
                    self.new_microbatch(j)
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
                    tops[bc] = h[0][0] if h else INF
                    heapq.heappush(blocked, (-(lim - tok_l[g]) * csz[bc], g))
                    continue
                load[g] += w
                tok = tok_l[g] = tok_l[g] + t
                if tok + L[j + 1] / csz[bc] > lim:  # the next (longest remaining) sequence cannot join: blocked
                    heapq.heappop(h)  # now, where it would go when it next reached the top
                    heapq.heappush(blocked, (-(lim - tok) * csz[bc], g))
                else:
                    heapq.heapreplace(h, (load[g] - cap[g], g))
                tops[bc] = h[0][0] if h else INF
                self.where[j] = g
                break

    def reprice(self) -> None:
        """The estimated work in other classes' groups, priced exactly now. The estimate is a chord of the work
        in log-log, above the work where that is log-log convex (a sum of powers of L: GEMMs, attention); where
        it fell short and a group ends above its capacity, the group gives its fill sequences back and they go
        to fill-class bins (none did on the shipped scenarios)."""
        where = np.asarray(self.where, dtype=np.int64)
        cls_w = np.asarray(self.cls, dtype=np.int64)[where]
        other = np.flatnonzero(cls_w != self.fc)
        if not other.size:
            return
        oc = cls_w[other]
        exact = self.fill_work(self.small[other], np.asarray(self.csz, dtype=np.int64)[oc],
                               np.asarray([u for _, u in self.classes], dtype=np.int64)[oc])
        loads = np.asarray(self.load, dtype=np.float64)
        np.add.at(loads, where[other], exact - self.work[oc, other])  # in sequence order, as one by one
        back = other[(loads > np.asarray(self.cap) * (1 + 1e-12))[where[other]]].tolist()
        if back and self.waits is not None:  # the compiled loop kept its heaps: these, with the loads it left
            self.heap_up(self.waits)
        self.load = loads.tolist()
        if back:  # some group is over (rare): its sequences leave at their exact work
            for j, x in zip(other.tolist(), exact.tolist()):
                self.work_l[self.cls[self.where[j]]][j] = x
            for j in back:
                g, c = self.where[j], self.cls[self.where[j]]
                self.load[g] -= self.work_l[c][j]
                self.tok[g] -= self.L[j] / self.csz[c]
                self.where[j] = -1
            self.put(back, [[self.fc]] * len(back))


def fill(pk: Packer, small: np.ndarray, lengths: np.ndarray, shares: np.ndarray, fill: tuple[int, int],
         fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
         fill_estimate: Callable[[np.ndarray, int, int], np.ndarray | None]) -> Fill:
    """Phase B (module docstring) of the fill sequences ``small``, largest share first; ``fill_work(positions,
    sizes, u)`` prices exactly, ``fill_estimate(positions, size, u)`` estimates (None: priced exactly now).
    Returns the finished :class:`Fill`."""
    f = Fill(pk, small, lengths, shares, fill, fill_work, fill_estimate)
    # the classes each sequence may use at all (finite work), one list per distinct set
    mask = (np.isfinite(f.work) << np.arange(f.nc)[:, None]).sum(axis=0)
    if hydra_kernels.ON and len(small):  # the optional compiled twin (policies/hydra_kernels.py): these bins
        hydra_kernels.fill(f, mask)
    else:
        cands = {m: [c for c in range(f.nc) if m >> c & 1] for m in set(mask.tolist())}
        f.heap_up(np.zeros(len(f.cls), dtype=bool))
        f.put(list(range(len(small))), [cands[m] for m in mask.tolist()])
    f.reprice()
    return f
