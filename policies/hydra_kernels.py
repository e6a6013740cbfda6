"""HyDra's optional compiled extra (``pip install -e ".[fast]"``: numba): scalar twins of three of its loops.

Not part of the readable core (policies/hydra/): the plain code there is the reference, and what it computes
these compute number for number (tests/policies/test_hydra_kernels.py: each twin against its plain function on
random inputs, and whole plans with and without them). They run when numba imports and the environment variable
``DCPSIM_KERNELS`` is not ``0``; otherwise ``ON`` is False and the plain code runs. Compiled once per machine
(``cache=True``: the first plan of a process loads them, the first one on a machine compiles them, seconds).

Plan time at the 2,048 × 256 benchmark cell (docs/hydra.md §8; one process, the twins on and off in turn, best
of 25, four runs, 2026-12-02): plain 18.35, 18.22, 20.34, 19.44 ms, all three twins 13.34, 13.09, 14.41,
13.79 ms (−27% to −29%). Each one's share, as the extra plan time without it, of the plain time:

===========  ==============================  ===================================================
twin         plain reference                 without it
===========  ==============================  ===================================================
``sweep``    ``order.makespans``             +11–16% (the 1F1B recurrence, level by level)
``balance``  ``order.balance_columns``       +2–6% (the mirroring; numpy's pairwise block sums)
``fill``     ``fill.Fill.put``               +6–7% (the fill's largest-first loop)
===========  ==============================  ===================================================
"""

from __future__ import annotations

import heapq
import importlib.util
import os
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.policies.errors import PolicyError

if TYPE_CHECKING:
    from dcpsim.policies.hydra.fill import Fill

ON = importlib.util.find_spec("numba") is not None and os.environ.get("DCPSIM_KERNELS", "1") != "0"
_JITTED: dict = {}


def _jitted() -> dict:
    """The twins compiled (or loaded from numba's cache) on first use, numba imported only then (start-up stays
    light); each replaces its plain-Python source in this module, so that ``_balance`` calls the compiled
    ``_pairwise``."""
    if not _JITTED:
        try:
            import numba
        except ImportError as e:  # installed but broken (e.g. built for another numpy): say so, once
            raise PolicyError(f"numba is installed but does not import ({e}); reinstall it, uninstall it, or set "
                              "DCPSIM_KERNELS=0 to plan with the plain code") from None
        for name in ("_pairwise", "_sweep", "_balance", "_fill_put"):
            globals()[name] = _JITTED[name] = numba.njit(cache=True)(globals()[name])
    return _JITTED


def _sweep(H, phase, mb, stage, dep, prev, phi, scale):
    """``order.makespans``'s recurrence for every row of H, operation by operation in level order (the schedule's
    arrays as ``order._schedule`` returns them; ``scale``: every stage's factor, ones for none)."""
    n = len(phase)
    end = np.zeros(n + 1)  # the last entry stays 0: the target of "none"
    out = np.empty(H.shape[0])
    for r in range(H.shape[0]):
        for i in range(n):
            a, b = end[dep[i]], end[prev[i]]
            end[i] = (a if a >= b else b) + H[r, mb[i]] * (phi if phase[i] == 0 else 1.0 - phi) * scale[stage[i]]
        out[r] = max(end[n - 1], 0.0)  # the last operation (stage 0's last backward) is the one that ends last
    return out


def sweep(H: np.ndarray, schedule: tuple[np.ndarray, ...], p: int, phi: float,
          stage_scale: np.ndarray | None) -> np.ndarray:
    """``order.makespans(H, p, phi, stage_scale)`` of one [C, m] matrix, ``schedule`` = ``order._schedule(m, p)``."""
    phase, mb, stage, _, dep, prev = schedule
    scale = np.ones(p) if stage_scale is None else np.asarray(stage_scale, dtype=np.float64)
    return _jitted()["_sweep"](H, phase, mb, stage, dep, prev, phi, scale)


def _pairwise(a, lo, n):
    """numpy's sum of the float64s a[lo:lo + n] (its pairwise summation: 8 accumulators, halves above 128)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= 128:
        r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
        r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
        for i in range(lo + 8, lo + n - n % 8, 8):
            r0, r1, r2, r3 = r0 + a[i], r1 + a[i + 1], r2 + a[i + 2], r3 + a[i + 3]
            r4, r5, r6, r7 = r4 + a[i + 4], r5 + a[i + 5], r6 + a[i + 6], r7 + a[i + 7]
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(lo + n - n % 8, lo + n):
            res += a[i]
        return res
    n2 = n // 2 - n // 2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


def _balance(loads, slow, slowed):
    """``balance_columns`` (its docstring) of loads [m, W], W a power of two above 1; ``slowed``: ``slow`` [W] holds
    the ranks' factors (else ones)."""
    m, W = loads.shape
    pos = np.empty((m, W), dtype=np.int64)
    total, tw, now, idx = np.zeros(W), np.empty(W), np.empty(W), np.empty(W, dtype=np.int64)
    for k in range(m):
        idx[:] = np.arange(W)  # idx[new position] = old rank
        tw[:] = total * slow if slowed else total
        s = W // 2
        while s >= 1:
            now[:] = loads[k][idx]
            for lo in range(0, W, 2 * s):
                h0, h1 = _pairwise(now, lo, s), _pairwise(now, lo + s, s)
                c0, c1 = _pairwise(tw, lo, s), _pairwise(tw, lo + s, s)
                if slowed:
                    f0, f1 = _pairwise(slow, lo, s) / s, _pairwise(slow, lo + s, s) / s
                    flip = max(c0 + h1 * f0, c1 + h0 * f1) < max(c0 + h0 * f0, c1 + h1 * f1)
                else:
                    flip = (h0 - h1) * (c0 - c1) > 0
                if flip:
                    idx[lo:lo + 2 * s] = np.concatenate((idx[lo + s:lo + 2 * s], idx[lo:lo + s]))
            s //= 2
        pos[k][idx] = np.arange(W)
        total += loads[k][idx]
    return pos


def balance(loads: np.ndarray, slow: np.ndarray | None) -> np.ndarray:
    """``order.balance_columns(loads, slow)`` on a pool of a power of two above 1 ranks."""
    W = loads.shape[1]
    return _jitted()["_balance"](loads, np.ones(W) if slow is None else np.asarray(slow, dtype=np.float64),
                                  slow is not None)


def _fill_put(L, work, mask, lim, csz, mb0, first0, cap0, load0, tok0, cls0, fc, W, cf, ovh_f, tau, tol, bslow, k):
    """``Fill.put`` of every fill sequence in turn (their classes as bit masks); a new microbatch (number k on, its
    height returned) opened as ``Fill.new_microbatch`` opens it. Returns each sequence's bin, the bins' arrays,
    which bins wait in the blocked heap, the new heights."""
    mb, first, cap, load, tok, cls = list(mb0), list(first0), list(cap0), list(load0), list(tok0), list(cls0)
    nc = work.shape[0]
    waits = [False] * len(cls)
    heaps = [[(0.0, 0)][:0] for _ in range(nc)]  # (load − capacity, bin) per class
    for g in range(len(cls)):
        heaps[cls[g]].append((load[g] - cap[g], g))
    tops = np.full(nc, np.inf)
    for c in range(nc):
        heapq.heapify(heaps[c])
        if heaps[c]:
            tops[c] = heaps[c][0][0]
    blocked, heights, where = [(0.0, 0)][:0], [0.0][:0], np.full(work.shape[1], -1)
    for j in range(work.shape[1]):
        while blocked and -blocked[0][0] >= L[j]:
            g = heapq.heappop(blocked)[1]
            waits[g] = False
            heapq.heappush(heaps[cls[g]], (load[g] - cap[g], g))
            tops[cls[g]] = heaps[cls[g]][0][0]
        skip = 0
        while True:
            best, bc = 1.0, -1  # the first class with the least top
            for c in range(nc):
                if mask[j] >> c & 1 and not skip >> c & 1 and tops[c] < best:
                    best, bc = tops[c], c
            if bc < 0:  # fits nowhere: a new microbatch and its free blocks (Packer.new_mb, free_blocks)
                heights.append((ovh_f + work[fc, j]) * bslow[0])
                mcap = (1.0 + tol) * max(tau, heights[-1])
                for b in range(W // cf):
                    heapq.heappush(heaps[fc], (ovh_f - mcap / bslow[b], len(cls)))
                    mb.append(k)
                    first.append(b * cf)
                    cap.append(mcap / bslow[b])
                    load.append(ovh_f)
                    tok.append(0.0)
                    cls.append(fc)
                    waits.append(False)
                k, skip, tops[fc] = k + 1, 0, heaps[fc][0][0]
                continue
            if best + work[bc, j] > 0.0:
                skip |= 1 << bc
                continue
            h, t = heaps[bc], L[j] / csz[bc]
            g = h[0][1]
            if tok[g] + t > lim:
                heapq.heappop(h)
                heapq.heappush(blocked, (-(lim - tok[g]) * csz[bc], g))
                waits[g] = True
                tops[bc] = h[0][0] if h else np.inf
                continue
            load[g] += work[bc, j]
            tok[g] += t
            if tok[g] + L[j + 1] / csz[bc] > lim:
                heapq.heappop(h)
                heapq.heappush(blocked, (-(lim - tok[g]) * csz[bc], g))
                waits[g] = True
            else:
                heapq.heapreplace(h, (load[g] - cap[g], g))
            tops[bc] = h[0][0] if h else np.inf
            where[j] = g
            break
    return (where, np.array(mb), np.array(first), np.array(cap), np.array(load), np.array(tok), np.array(cls),
            np.array(waits), np.array(heights))


def fill(f: Fill, mask: np.ndarray) -> None:
    """``f.put`` of every fill sequence in order (``mask``: each one's classes as bits) by ``_fill_put``: the
    same bins, loads and new microbatches; ``f.waits`` keeps the bins in the blocked heap (``Fill.heap_up``)."""
    pk, cf = f.pk, f.cf
    bslow = np.ones(pk.W // cf) if pk.slow is None else pk.slow[:pk.W // cf * cf].reshape(-1, cf).max(axis=1)
    mb, first, cls = (np.asarray(x, dtype=np.int64) for x in (f.mb, f.first, f.cls))
    out = _jitted()["_fill_put"](np.asarray(f.L), f.work, mask, f.lim, np.asarray(f.csz), mb, first,
                                 np.asarray(f.cap), np.asarray(f.load), np.asarray(f.tok), cls, f.fc, pk.W, cf,
                                 f.ovh_f, pk.tau, pk.tol, bslow, len(pk.caps))
    f.where, f.mb, f.first, f.cap, f.load, f.tok, f.cls = (x.tolist() for x in out[:7])
    f.waits = out[7]
    for h in out[8].tolist():
        pk.new_mb(h)
