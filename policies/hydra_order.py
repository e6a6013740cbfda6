"""The order of HyDra's microbatches under non-interleaved 1F1B.

Microbatches of equal height can run in any order. A *heavy* microbatch (a sequence whose smallest share
exceeds the target τ) cannot be made shorter, and where it sits in the 1F1B schedule matters: its forward
and backward cross all p stages in series, and the other stages idle unless light microbatches are in
flight around it. In the simulator, moving the heavy block of the default 256K scenario changes the
iteration time by about 4%.

HyDra therefore scores candidate orders with the 1F1B recurrence of one pipeline column and keeps the best.
Stage s runs min(p − s − 1, m) warm-up forwards, then alternates F(w + i), B(i), then the remaining
backwards; F(s, k) waits for F(s − 1, k) and B(s, k) for B(s + 1, k); a microbatch of height h splits into
forward φ·h and backward (1 − φ)·h (φ ≈ 0.3: GEMM backward is 2× forward, attention backward 2.5×).
Transfers between stages and coupling across ranks are left out: it is a ranking device, O(m·p) per order.
"""

from __future__ import annotations

import numpy as np

FORWARD_FRACTION = 0.3


def stage_order(stage: int, p: int, m: int) -> list[tuple[int, int]]:
    """(phase, microbatch) in 1F1B order at ``stage``; phase 0 = forward, 1 = backward."""
    w = min(p - stage - 1, m)
    ops = [(0, k) for k in range(w)]
    for i in range(m - w):
        ops += [(0, w + i), (1, i)]
    ops += [(1, k) for k in range(m - w, m)]
    return ops


def makespan(heights: np.ndarray, p: int, phi: float = FORWARD_FRACTION) -> float:
    """Time of one pipeline column running microbatches of ``heights`` (per stage, F + B) in this order."""
    m = len(heights)
    if m == 0:
        return 0.0
    f = (phi * np.asarray(heights, dtype=np.float64)).tolist()
    b = ((1.0 - phi) * np.asarray(heights, dtype=np.float64)).tolist()
    end = [[[-1.0] * m, [-1.0] * m] for _ in range(p)]  # end[s][phase][k]; -1 = not yet
    orders = [stage_order(s, p, m) for s in range(p)]
    ptr, clock = [0] * p, [0.0] * p
    remaining = 2 * m * p
    while remaining:
        progressed = False
        for s in range(p):
            ops = orders[s]
            while ptr[s] < len(ops):
                ph, k = ops[ptr[s]]
                if ph == 0:
                    dep = end[s - 1][0][k] if s > 0 else 0.0
                else:
                    dep = end[s + 1][1][k] if s < p - 1 else end[s][0][k]
                if dep < 0.0:
                    break
                start = max(clock[s], dep)
                clock[s] = start + (f[k] if ph == 0 else b[k])
                end[s][ph][k] = clock[s]
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for a 1F1B order; guard against an endless loop
            raise RuntimeError("1F1B recurrence made no progress")
    return max(clock)


def best_order(heights: np.ndarray, heavy: np.ndarray, p: int) -> list[int]:
    """Microbatch order: light microbatches in their order, the heavy ones as one block (tallest first or
    last) at the position the 1F1B recurrence scores best. Positions tried: every one when there are few
    light microbatches, else the first and last 2p + 1."""
    idx = np.arange(len(heights))
    hv = idx[heavy]
    lt = idx[~heavy]
    if hv.size == 0 or lt.size == 0 or p == 1:
        return np.r_[hv[np.argsort(-heights[hv], kind="stable")], lt].astype(int).tolist()
    n = lt.size
    positions = sorted(set(range(n + 1)) if n <= 4 * p + 2 else
                       set(range(2 * p + 1)) | set(range(n - 2 * p, n + 1)))
    blocks = [hv[np.argsort(-heights[hv], kind="stable")], hv[np.argsort(heights[hv], kind="stable")]]
    best: tuple[float, list[int]] | None = None
    for j in positions:
        for blk in blocks:
            order = np.r_[lt[:j], blk, lt[j:]].astype(int)
            t = makespan(heights[order], p)
            if best is None or t < best[0] * (1 - 1e-12):
                best = (t, order.tolist())
    assert best is not None
    return best[1]
