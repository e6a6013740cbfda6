"""HyDra's step 5, the order of the microbatches under non-interleaved 1F1B and the columns (docs/hydra.md §7).

A heavy microbatch cannot be made shorter, and where it sits in the schedule matters (about 4% of the default
256K scenario's iteration time). Candidate orders are scored with the 1F1B recurrence of one pipeline column
(the simulator's per-stage order, :mod:`dcpsim.policies.pipeline_order`; forward φ·h, backward (1 − φ)·h;
transfers left out: a ranking device, O(m·p) per order); the light heights may ramp at both ends. Once the
order is fixed, :func:`balance_columns` mirrors aligned halves of the pool microbatch by microbatch so that
every rank's total load evens out.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dcpsim.policies import hydra_kernels
from dcpsim.policies.pipeline_order import one_f_one_b_position

FORWARD_FRACTION = 0.3


@lru_cache(maxsize=256)
def _schedule(m: int, p: int) -> tuple[np.ndarray, ...]:
    """The 2·m·p operations of 1F1B in topological levels (each level a contiguous range): per operation its phase
    (0 forward, 1 backward), microbatch, stage and level, and the index of the operation it waits for on the
    neighbouring stage and of the previous one on its stage (n: none). Kept per (m, p): built by a Python loop
    (0.34 ms at m = 20, p = 4); uncached, the 2,048 × 256 cell plans 12.5% slower (19.0 against 16.6 ms)."""
    n2, n = 2 * m, 2 * m * p
    ph0 = np.repeat(np.array([0, 1], dtype=np.int64), m)
    mb0 = np.tile(np.arange(m, dtype=np.int64), 2)
    # operations numbered stage by stage, each stage's in its 1F1B order: (s, phase, k) is idx[s, phase·m + k]
    idx = (np.stack([one_f_one_b_position(s, p, m, ph0, mb0) for s in range(p)])
           + (np.arange(p, dtype=np.int64) * n2)[:, None])
    phase = np.empty(n, dtype=np.int64)
    mb = np.empty(n, dtype=np.int64)
    phase[idx.ravel()] = np.tile(ph0, p)
    mb[idx.ravel()] = np.tile(mb0, p)
    stage = np.repeat(np.arange(p, dtype=np.int64), n2)
    key = phase * m + mb
    prev_a = np.arange(n, dtype=np.int64) - 1
    prev_a[::n2] = -1
    # a forward waits for the stage before's forward; a backward for the stage after's backward, or on the
    # last stage for its own forward
    dep_a = np.where(phase == 0, np.where(stage > 0, idx[np.maximum(stage - 1, 0), key], -1),
                     np.where(stage < p - 1, idx[np.minimum(stage + 1, p - 1), key], idx[stage, mb]))
    # Longest-path levels: each stage's operations in its order, as far as their dependencies are placed, round
    # after round over the stages (the schedule never deadlocks, so every round places some).
    dep, prev, level = dep_a.tolist(), prev_a.tolist(), [-1] * n
    ptr = list(range(0, n, n2))
    left = n
    while left:
        for s in range(p):
            i, end = ptr[s], (s + 1) * n2
            while i < end:
                d = dep[i]
                ld = level[d] if d >= 0 else -1
                if d >= 0 and ld < 0:
                    break
                lp = level[prev[i]] if prev[i] >= 0 else -1
                level[i] = (ld if ld > lp else lp) + 1
                i += 1
            left -= i - ptr[s]
            ptr[s] = i
    lv = np.asarray(level)
    order = np.argsort(lv, kind="stable")
    new = np.empty(n + 1, dtype=np.int64)
    new[order] = np.arange(n)
    new[n] = n  # index −1 reads new[-1] = n
    return phase[order], mb[order], stage[order], lv[order], new[dep_a[order]], new[prev_a[order]]


def makespans(heights: np.ndarray, p: int, phi: float = FORWARD_FRACTION,
              stage_scale: np.ndarray | None = None) -> np.ndarray:
    """Makespan of one pipeline column for each row of ``heights`` [C, m] (one candidate order per row, per stage
    F + B; ``stage_scale`` [p]: each stage's time as a fraction of the heights, None: all at the heights): the
    recurrence end = max(end[dependency], end[previous]) + duration, level by level, all rows at once."""
    H = np.atleast_2d(np.asarray(heights, dtype=np.float64))
    if H.shape[1] == 0:
        return np.zeros(H.shape[0])
    phase, mb, stage, level, dep, prev = _schedule(H.shape[1], p)
    if hydra_kernels.ON:  # the optional compiled twin (policies/hydra_kernels.py): these numbers
        return hydra_kernels.sweep(H, (phase, mb, stage, level, dep, prev), p, phi, stage_scale)
    dur = H.T[mb] * np.where(phase == 0, phi, 1.0 - phi)[:, None]  # [ops, C]
    if stage_scale is not None:  # each stage at its share of the heights (the heaviest stage's time)
        dur *= np.asarray(stage_scale, dtype=np.float64)[stage][:, None]
    end = np.zeros((len(phase) + 1, H.shape[0]))  # the last row stays 0: the target of "none"
    edges = np.searchsorted(level, np.arange(int(level[-1]) + 2)).tolist()
    for a, b in zip(edges[:-1], edges[1:]):  # per level: end = max(end[dependency], end[previous]) + duration
        end[a:b] = np.maximum(end[dep[a:b]], end[prev[a:b]]) + dur[a:b]
    return np.maximum(end.max(axis=0), 0.0)


def makespan_floor(h: np.ndarray, p: int) -> float:
    """≤ :func:`makespans` of heights ``h`` in any order: Σh + (p − 1)·min h (the last stage runs every F + B, after
    p − 1 forwards upstream and before its last backward's p − 1 upstream: (p − 1)·(φ·h_first + (1 − φ)·h_last))."""
    return float(h.sum() + (p - 1) * h.min()) if len(h) else 0.0


def _all_orders(heights: np.ndarray, heavy: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Every order :func:`candidate_orders` may return (``ends`` = 0), the block's position j among the n light
    microbatches of each row, and n. Row r puts the light microbatches before j_r, then the heavy block (two
    rows per position: tallest first, then tallest last), then the rest: one gather from a [rows, m] grid."""
    h = heights.tolist()
    hv = [i for i, x in enumerate(heavy.tolist()) if x]
    lt = [i for i, x in enumerate(heavy.tolist()) if not x]
    tallest = sorted(hv, key=lambda i: -h[i])  # = hv[np.argsort(-heights[hv], kind="stable")]
    if not hv or not lt or p == 1:
        return np.array(tallest + lt, dtype=np.int64)[None, :], np.zeros(1, dtype=np.int64), 0
    n, nh = len(lt), len(hv)
    positions = np.asarray(sorted(set(range(min(n, p) + 1)) | set(range(max(0, n - p), n + 1))
                                  | set(range(0, n + 1, -(-n // 16)))), dtype=np.int64)
    j = np.repeat(positions, 2)[:, None]
    t = np.arange(n + nh)[None, :]
    first = n + nh * np.tile([0, 1], len(positions))[:, None]  # where the row's block starts in src
    idx = np.where(t < j, t, np.where(t < j + nh, first + (t - j), t - nh))
    src = np.array(lt + tallest + sorted(hv, key=lambda i: h[i]), dtype=np.int64)
    return src[idx], j[:, 0], n


def candidate_orders(heights: np.ndarray, heavy: np.ndarray, p: int, ends: int = 0) -> np.ndarray:
    """[C, m] orders to score: light microbatches in their order, the heavy ones as one block (tallest first
    or last) at positions 0..p and n−p..n among the n light ones, and every ⌈n/16⌉-th position between
    (the middle: flanked by tall light microbatches when the light heights ramp up towards it); never inside
    the first or last ``ends`` light ones (a height profile's ramps stay at the ends)."""
    orders, j, n = _all_orders(np.asarray(heights), np.asarray(heavy, dtype=bool), p)
    if n == 0:
        return orders
    ends = min(ends, n // 2)
    return orders[(j >= ends) & (j <= n - ends)]


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
    return np.concatenate([ramp, np.full(mid, tau + 2.0 * float((tau - ramp).sum()) / mid), ramp[::-1]]), r


def height_profiles(requests: list[tuple[int, float, np.ndarray]], p: int) -> list[np.ndarray]:
    """Per (m_light, τ, heavy heights) of ``requests``: the light microbatches' target heights in run order,
    chosen with the 1F1B recurrence. A pipeline column fills for the forwards of its first microbatches and
    drains for the backwards of its last ones: short microbatches at both ends shrink that. Candidates ramp
    r = 1..min(p, ⌊m/3⌋) microbatches at each end (:func:`ramped`, each floor of ``RAMP_FLOORS``), the flat
    profile too; each is scored with the heavy block at its best position, never inside its ramps; every
    profile × order of a request in one :func:`makespans` sweep."""
    out: list[np.ndarray] = []
    mats: list[np.ndarray] = []
    todo: list[tuple[int, list[list[float]], np.ndarray]] = []  # (request, profiles, each one's first row)
    for q, (m_light, tau, heavy_heights) in enumerate(requests):
        out.append(np.full(m_light, float(tau)))
        if m_light < 3 or p == 1:
            continue
        head = np.asarray(heavy_heights, dtype=np.float64).tolist()
        heavy = np.arange(len(head) + m_light) < len(head)
        profiles, ramps = [[float(tau)] * m_light], [0]
        for r in range(1, min(p, m_light // 3) + 1):
            for a in RAMP_FLOORS:
                profiles.append(ramped(m_light, float(tau), p, r, a)[0].tolist())
                ramps.append(r)
        rows = [np.array(head + x)[candidate_orders(np.array(head + x), heavy, p, r)]
                for x, r in zip(profiles, ramps)]
        mats.append(np.concatenate(rows))
        todo.append((q, profiles, np.cumsum([0] + [len(x) for x in rows[:-1]])))
    for (q, cands, first), t in zip(todo, [makespans(x, p) for x in mats]):
        scores = np.minimum.reduceat(t, first)
        out[q] = np.array(cands[int(np.argmin(scores * (1 + 1e-9 * np.arange(len(scores)))))], dtype=np.float64)
    return out


def balance_columns(loads: np.ndarray, slow: np.ndarray | None = None) -> np.ndarray:
    """Mirror aligned blocks so that every rank ends the iteration with a similar total load. ``loads`` [m, W]:
    each rank's load per microbatch in run order, W a power of two, every group an aligned block. Microbatch by
    microbatch, top-down over the binary tree of aligned blocks, the two halves of a block swap places when that
    puts this microbatch's heavier half on the columns that carried less so far (with ``slow``, [W] slow-down
    factors: when that lowers the larger of the halves' projected times). A group never straddles a swapped
    boundary, so it stays an aligned block. Returns ``pos`` [m, W]: each old rank's new rank."""
    m, W = loads.shape
    pos = np.tile(np.arange(W), (m, 1))
    if W & (W - 1) or W == 1:
        return pos
    if hydra_kernels.ON:  # the optional compiled twin (policies/hydra_kernels.py): this ``pos``
        return hydra_kernels.balance(np.asarray(loads, dtype=np.float64), slow)
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
