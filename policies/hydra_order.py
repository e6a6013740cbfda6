"""The order of HyDra's microbatches under non-interleaved 1F1B.

Microbatches of equal height can run in any order. A *heavy* microbatch (a sequence whose smallest share
exceeds the target τ) cannot be made shorter, and where it sits in the 1F1B schedule matters: its forward
and backward cross all p stages in series, and the other stages idle unless light microbatches are in
flight around it. In the simulator, moving the heavy block of the default 256K scenario changes the
iteration time by about 4%; the recurrence below ranks those orders as the simulator does (correlation
0.997 over every position of the block).

HyDra therefore scores candidate orders with the 1F1B recurrence of one pipeline column and keeps the best.
Every stage runs the simulator's 1F1B order (:mod:`dcpsim.policies.pipeline_order`: min(p − s − 1, m) warm-up
forwards, then F(w + i), B(i) alternating, then the remaining backwards); F(s, k) waits for F(s − 1, k) and
B(s, k) for B(s + 1, k); a microbatch of height h splits into forward φ·h and backward (1 − φ)·h (φ ≈ 0.3:
GEMM backward is 2× forward, attention backward 2.5×).
Transfers between stages and coupling across ranks are left out: it is a ranking device, O(m·p) per order.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dcpsim.policies.pipeline_order import stage_order

FORWARD_FRACTION = 0.3


@lru_cache(maxsize=256)
def _schedule(m: int, p: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """The 2·m·p operations of 1F1B and their dependencies, grouped into topological levels.

    Returns per operation its phase and microbatch, then the operation indices of each level (operations of
    one level do not depend on each other), and for each operation the index of the operation it waits for
    on the neighbouring stage and of the previous operation on its own stage (−1: none; the caller maps −1
    to a row of zeros). The structure depends on (m, p) only, never on durations: computed once, reused."""
    phase: list[int] = []
    mb: list[int] = []
    dep: list[int] = []
    prev: list[int] = []
    index: dict[tuple[int, int, int], int] = {}
    orders = [list(zip(*(a.tolist() for a in stage_order(s, p, m)))) for s in range(p)]
    for s in range(p):
        last = -1
        for ph, k in orders[s]:
            index[(s, ph, k)] = len(phase)
            phase.append(ph)
            mb.append(k)
            prev.append(last)
            last = len(phase) - 1
    for s in range(p):
        for ph, k in orders[s]:
            if ph == 0:
                dep.append(index[(s - 1, 0, k)] if s > 0 else -1)
            else:
                dep.append(index[(s + 1, 1, k)] if s < p - 1 else index[(s, 0, k)])
    n = len(phase)
    dep_a, prev_a = np.asarray(dep, dtype=np.int64), np.asarray(prev, dtype=np.int64)
    # Longest-path levels by relaxation in a topological sweep (Kahn's algorithm).
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i in range(n):
        for d in (dep[i], prev[i]):
            if d >= 0:
                succ[d].append(i)
                indeg[i] += 1
    level = [0] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    while ready:
        i = ready.pop()
        for j in succ[i]:
            level[j] = max(level[j], level[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    lv = np.asarray(level)
    order = np.argsort(lv, kind="stable")
    bounds = np.searchsorted(lv[order], np.arange(lv.max() + 2))
    levels = [order[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
    return np.asarray(phase), np.asarray(mb), levels, dep_a, prev_a


def makespans(heights: np.ndarray, p: int, phi: float = FORWARD_FRACTION) -> np.ndarray:
    """Makespan of one pipeline column for each row of ``heights`` [C, m] (one candidate order per row),
    all rows at once: the recurrence end = max(end[dependency], end[previous]) + duration runs level by
    level over the fixed dependency structure with vector arithmetic."""
    H = np.atleast_2d(np.asarray(heights, dtype=np.float64))
    C, m = H.shape
    if m == 0:
        return np.zeros(C)
    phase, mb, levels, dep, prev = _schedule(m, p)
    dur = np.where(phase[:, None] == 0, phi, 1.0 - phi) * H.T[mb]  # [ops, C]
    end = np.zeros((len(phase) + 1, C))  # the last row stays 0: the target of index −1
    for ops in levels:
        end[ops] = np.maximum(end[dep[ops]], end[prev[ops]]) + dur[ops]
    return end.max(axis=0)


def makespan(heights: np.ndarray, p: int, phi: float = FORWARD_FRACTION) -> float:
    """Time of one pipeline column running microbatches of ``heights`` (per stage, F + B) in this order."""
    return float(makespans(np.asarray(heights)[None, :], p, phi)[0])


def candidate_orders(heights: np.ndarray, heavy: np.ndarray, p: int, ends: int = 0) -> np.ndarray:
    """[C, m] orders to score: light microbatches in their order, the heavy ones as one block (tallest first
    or last) at positions 0..p and n−p..n among the n light ones, and every ⌈n/16⌉-th position between
    (the middle: flanked by tall light microbatches when the light heights ramp up towards it); never inside
    the first or last ``ends`` light ones (a height profile's ramps stay at the ends)."""
    idx = np.arange(len(heights))
    hv, lt = idx[heavy], idx[~heavy]
    blocks = [hv[np.argsort(-heights[hv], kind="stable")], hv[np.argsort(heights[hv], kind="stable")]]
    if hv.size == 0 or lt.size == 0 or p == 1:
        return np.concatenate([blocks[0], lt])[None, :].astype(np.int64)
    n = lt.size
    positions = sorted(set(range(min(n, p) + 1)) | set(range(max(0, n - p), n + 1))
                       | set(range(0, n + 1, -(-n // 16))))
    ends = min(ends, n // 2)
    positions = [j for j in positions if ends <= j <= n - ends]
    out = np.empty((2 * len(positions), len(heights)), dtype=np.int64)
    r = 0
    for j in positions:
        for blk in blocks:
            out[r, :j] = lt[:j]
            out[r, j:j + hv.size] = blk
            out[r, j + hv.size:] = lt[j:]
            r += 1
    return out


def best_order(heights: np.ndarray, heavy: np.ndarray, p: int, ends: int = 0) -> tuple[list[int], float]:
    """The candidate order (:func:`candidate_orders`) with the smallest 1F1B makespan, and that makespan."""
    heights = np.asarray(heights, dtype=np.float64)
    orders = candidate_orders(heights, np.asarray(heavy, dtype=bool), p, ends)
    t = makespans(heights[orders], p)
    j = int(np.argmin(t))
    return orders[j].tolist(), float(t[j])


RAMP_FLOORS = (0.25, 0.5)  # the shortest ramp microbatch as a fraction of τ (candidates)


def ramped(m_light: int, tau: float, p: int, r: int | None = None, a: float = RAMP_FLOORS[0]
           ) -> tuple[np.ndarray, int]:
    """``m_light`` heights that ramp linearly from a·τ towards τ over r microbatches at each end (r = min(p, ⌊m/3⌋)
    unless given), the middle raised so that Σh = m·τ; and r. Flat (r = 0) when m < 3 or p = 1."""
    r = min(p, m_light // 3) if r is None else r
    if r < 1 or p == 1:
        return np.full(m_light, float(tau)), 0
    ramp = tau * (a + (1.0 - a) * np.arange(r) / r)
    mid = m_light - 2 * r
    return np.r_[ramp, np.full(mid, tau + 2.0 * float((tau - ramp).sum()) / mid), ramp[::-1]], r


def height_profile(m_light: int, tau: float, heavy_heights: np.ndarray, p: int) -> np.ndarray:
    """Target heights of the ``m_light`` light microbatches in run order, chosen with the 1F1B recurrence.

    A pipeline column fills for the forwards of its first microbatches and drains for the backwards of its
    last ones, about (p − 1)·(φ·h_first + (1 − φ)·h_last) of idle per stage: short microbatches at both ends
    shrink it. Candidates ramp r = 1..min(p, ⌊m/3⌋) microbatches at each end linearly from a·τ up towards τ
    (a in ``RAMP_FLOORS``) and raise the middle ones so that the total Σh = m·τ is kept (the same work); each
    is scored with the heavy microbatches at their best position (:func:`best_order`), and the flat profile
    (every height τ) stays a candidate, so the choice is never worse than flat by the recurrence."""
    flat = np.full(m_light, float(tau))
    if m_light < 3 or p == 1:
        return flat
    hv = np.asarray(heavy_heights, dtype=np.float64)
    profiles, ramps = [flat], [0]
    for r in range(1, min(p, m_light // 3) + 1):
        for a in RAMP_FLOORS:
            profiles.append(ramped(m_light, tau, p, r, a)[0])
            ramps.append(r)
    heavy = np.r_[np.ones(hv.size, dtype=bool), np.zeros(m_light, dtype=bool)]
    scores = [best_order(np.r_[hv, h], heavy, p, r)[1] for h, r in zip(profiles, ramps)]
    return profiles[int(np.argmin(np.asarray(scores) * (1 + 1e-9 * np.arange(len(scores)))))]


def balance_columns(loads: np.ndarray, slow: np.ndarray | None = None) -> np.ndarray:
    """Mirror aligned blocks so that every rank ends the iteration with a similar total load.

    ``loads`` [m, W] is each rank's load per microbatch in run order, W a power of two and every group an
    aligned block. Microbatch by microbatch, top-down over the binary tree of aligned blocks, the two halves
    of a block swap places when that puts the half with more load of this microbatch on the half of the
    columns that has carried less so far. A group never straddles a swapped boundary (it is aligned and
    smaller than the block, or it contains the block), so every group stays an aligned block of the same
    ranks' size. Returns ``pos`` [m, W]: the new rank of each old rank. O(m · W · log W), vectorised per level.
    With ``slow`` ([W] slow-down factors ≥ 1, stragglers) the halves compare time, not load: a column's load
    takes f times as long, and the halves swap when that lowers the larger of their projected times.
    """
    m, W = loads.shape
    pos = np.tile(np.arange(W), (m, 1))
    if W & (W - 1) or W == 1:
        return pos
    total = np.zeros(W)
    for k in range(m):
        idx = np.arange(W)  # idx[new position] = old rank
        s = W // 2
        while s >= 1:
            blocks = idx.reshape(-1, 2, s)
            have = loads[k][blocks].sum(axis=2)
            if slow is None:
                carried = total.reshape(-1, 2, s).sum(axis=2)
                flip = ((have[:, 0] - have[:, 1]) * (carried[:, 0] - carried[:, 1])) > 0
            else:  # per half: time carried, and the mean factor a load placed there runs at
                carried = (total * slow).reshape(-1, 2, s).sum(axis=2)
                f = slow.reshape(-1, 2, s).mean(axis=2)
                stay = np.maximum(carried[:, 0] + have[:, 0] * f[:, 0], carried[:, 1] + have[:, 1] * f[:, 1])
                swap = np.maximum(carried[:, 0] + have[:, 1] * f[:, 0], carried[:, 1] + have[:, 0] * f[:, 1])
                flip = swap < stay
            blocks[flip] = blocks[flip][:, ::-1, :]
            idx = blocks.reshape(-1)
            s //= 2
        pos[k, idx] = np.arange(W)
        total += loads[k][idx]
    return pos
