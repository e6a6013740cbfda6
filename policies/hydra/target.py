"""HyDra's load target τ, its degree rule, and the packing of heavy sequences.

The balance argument
--------------------
Let every one of the W ranks run m microbatches, and let each (rank, microbatch) slot carry the same load τ
(seconds per stage, forward + backward, compute + exposed CP communication). A sequence i of degree c_i puts
its per-rank work w_i(c_i) on each of its c_i ranks, and every occupied slot pays its group's fixed overhead
(≈ ō). Counting rank-seconds both ways gives the target in closed form:

    W · m · τ  =  Σ_i c_i · w_i(c_i)  +  W · m · ō          ⇒          τ = F(τ) / (W · m) + ō,

where F(τ) = Σ_i c_i · w_i(c_i(τ)) is the batch's total rank-work *including communication*, and the degree
rule makes it depend on τ: c_i(τ) is the smallest allowed degree ≥ the memory minimum whose load alone,
w_i(c) + overhead(c), fits τ. A smaller τ asks for larger degrees, hence more communication and a larger F.
F is a step function of τ: it changes only where some sequence's degree changes. Between two breakpoints F is
a constant F_e and the fixed point is τ_e = F_e / (W·m) + ō exactly; the target is the smallest τ with
τ ≥ F(τ)/(W·m) + ō, found by one pass over the sorted breakpoints (at a jump, the breakpoint itself).

Heavy sequences
---------------
A sequence whose smallest load alone (over every allowed degree) still exceeds τ cannot be balanced: its
microbatch lasts at least that load h. HyDra gives such sequences microbatches of their own (co-located by
first fit, largest degree first), whose other ranks may be filled up to h, and balances the rest:

    τ = (F_light(τ) − C_H) / (W · m_L) + ō,     C_H = Σ_heavy microbatches (W·h_k − heavy rank-work in k),

iterated until the heavy set is stable (at most four rounds).

The choice of the microbatch count m (the group structure, memory, the 1F1B estimate) is in
:mod:`policies.hydra_msearch`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.policies.hydra.work import WorkGrid



def alone_load(grid: WorkGrid) -> np.ndarray:
    """[G, K] load of a group holding only that sequence (work + overhead); inf where memory forbids."""
    return np.where(grid.fits, grid.work + grid.overhead, np.inf)


@dataclass(frozen=True)
class TargetModel:
    """F(τ) of a batch as a step function, built once from the work grid (module docstring)."""

    thresholds: np.ndarray  # [E] ascending breakpoints
    F: np.ndarray  # [E + 1]: F[e] holds on [thresholds[e-1], thresholds[e])
    heavy_thr: np.ndarray  # [G] a cell is heavy below its smallest share
    heavy_k: np.ndarray  # [G] its degree index when heavy (argmin share)
    rank_work: np.ndarray  # [G, K] R_j · D_k · work[j, k] + count_j · D_k · (overhead[j, k] − overhead[j, 0])
    slot_overhead: float  # ō
    # per cell: sequences, their summed weight R, and the degree records (row, degree index, load alone) of
    # cells holding sequences, row-major (what TargetSearch reads the degrees at many τ off)
    cell_count: np.ndarray | None = None
    cell_weight: np.ndarray | None = None
    records: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def build_target_model(grid: WorkGrid) -> TargetModel:
    G, K = grid.work.shape
    R = np.bincount(grid.cell, weights=grid.scale, minlength=G)
    wm = alone_load(grid)
    before = np.empty_like(wm)  # each degree's predecessor's load alone (inf before the first)
    before[:, 0] = np.inf
    before[:, 1:] = wm[:, :-1]
    prev_min = np.minimum.accumulate(before, axis=1)
    rec = np.isfinite(wm) & (wm < prev_min) & (R[:, None] > 0)
    rows, cols = np.nonzero(rec)  # row-major: each row's records by increasing degree
    # rank-seconds: the work, plus what each group above the smallest degree adds to its ranks' slots beyond
    # the slot overhead ō (more ring steps: their fixed costs and latencies), one group per sequence there
    count = np.bincount(grid.cell, minlength=G).astype(np.float64)
    extra = np.maximum(grid.overhead - grid.overhead[:, :1], 0.0) * float(grid.extra_overhead)
    rw = R[:, None] * grid.degrees[None, :] * grid.work + count[:, None] * grid.degrees[None, :] * extra
    flat = rows * K + cols
    rec_wm, rec_rw = wm.ravel().take(flat), rw.ravel().take(flat)  # at each record
    same = rows[1:] == rows[:-1]
    # Event at τ = share of record q: the cell drops from record q+1's degree to record q's.
    ev_t = rec_wm[:-1][same]
    ev_d = (rec_rw[:-1] - rec_rw[1:])[same]
    last = np.concatenate([~same, np.ones(1, dtype=bool)])
    heavy_k = np.zeros(G, dtype=np.int64)
    heavy_thr = np.full(G, -np.inf)
    heavy_k[rows[last]] = cols[last]
    heavy_thr[rows[last]] = rec_wm[last]
    f_low = float(rec_rw[last].sum())
    order = np.argsort(ev_t, kind="stable")
    thr = ev_t[order]
    F = f_low + np.concatenate([np.zeros(1), np.cumsum(ev_d[order])])
    return TargetModel(thr, F, heavy_thr, heavy_k, rw, float(grid.overhead[0, 0]), count, R,
                       (rows, cols, rec_wm))


def solve_tau(tm: TargetModel, pool: float, m_light: int, excluded: float = 0.0) -> float:
    """Smallest τ ≥ (F(τ) − excluded) / (W · m_light) + ō over the step function F. With stragglers W is the
    effective pool Σ_w 1/f_w (a rank of slow-down f carries τ/f): the target of a full-speed rank."""
    tau_e = (tm.F - excluded) / (pool * m_light) + tm.slot_overhead
    upper = np.r_[tm.thresholds, np.inf]
    lower = np.r_[0.0, tm.thresholds]
    e = int(np.argmax(tau_e < upper))  # the last interval always qualifies (upper = inf)
    return float(max(tau_e[e], lower[e], tm.slot_overhead, 1e-12))


def cell_degrees(grid: WorkGrid, tm: TargetModel, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Degree index of every grid cell at target τ and whether the cell is heavy there."""
    ok = alone_load(grid) <= tau
    heavy = ~ok.any(axis=1)
    k = np.where(heavy, tm.heavy_k, np.argmax(ok, axis=1))
    return k, np.asarray(heavy)


def pack_heavy(shares: np.ndarray, sizes: np.ndarray, pool: int) -> tuple[np.ndarray, np.ndarray]:
    """First fit of heavy sequences (largest degree first, then largest share) into microbatches by free
    ranks. Returns each sequence's microbatch (0-based among heavy ones) and each microbatch's height.

    Sequences of one degree c are placed together: first fit of equal sizes fills microbatch after microbatch
    with ⌊free / c⌋ of them, so a cumulative sum assigns a whole class at once (a few numpy calls per class).
    """
    n = len(shares)
    where = np.zeros(n, dtype=np.int64)
    free = np.zeros(0, dtype=np.int64)
    height = np.zeros(0)
    order = np.lexsort((-shares, -sizes))
    for c in np.unique(sizes)[::-1].tolist():
        items = order[sizes[order] == c]
        slots = free // c
        have = int(slots.sum())
        if have < len(items):
            extra = -(-(len(items) - have) // (pool // c))
            free = np.r_[free, np.full(extra, pool, dtype=np.int64)]
            height = np.r_[height, np.zeros(extra)]
            slots = free // c
        mb = np.searchsorted(np.cumsum(slots), np.arange(len(items)), side="right")
        where[items] = mb
        free = free - c * np.bincount(mb, minlength=len(free))
        np.maximum.at(height, mb, shares[items])
    return where, height


def pack_heights(loads: np.ndarray, sizes: np.ndarray, pool: int) -> np.ndarray:
    """The microbatch heights of :func:`pack_heavy` (the same first fit), without the assignment: per degree
    class, largest first, the loads in falling order fill the microbatches' free slots in turn, so each
    microbatch's tallest new load is the first one it takes (:func:`pack_sorted` on the sorted loads)."""
    order = np.lexsort((-loads, -sizes))  # degree falling, then load falling (ties: equal heights either way)
    return pack_sorted(loads[order], sizes[order], pool)


def pack_sorted(loads: np.ndarray, sizes: np.ndarray, pool: int) -> np.ndarray:
    """:func:`pack_heights` of loads already ordered by degree (falling) and, within a degree, by load
    (falling). Per class: the microbatches left with free ranks (few: a class of c ranks fills ⌊W/c⌋ per
    microbatch and leaves W mod c, and only its last one partly) take their share one by one; the rest of
    the class opens microbatches of ⌊W/c⌋ loads each, whose heights are every ⌊W/c⌋-th load (one slice)."""
    if not len(sizes):
        return np.zeros(0)
    bounds = [0, *(np.flatnonzero(sizes[1:] != sizes[:-1]) + 1).tolist(), len(sizes)]
    return first_fit(loads, [(int(sizes[lo]), lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])], pool)


def first_fit(loads: np.ndarray, classes: list[tuple[int, int, int]], pool: int) -> np.ndarray:
    """:func:`pack_sorted` with the classes given: (ranks c, start, stop) of each class's loads, degree
    falling, each class non-empty."""
    if not classes:
        return np.zeros(0)
    segs: list[np.ndarray] = []  # the heights of the microbatches each class opened, in microbatch order
    open_: list[tuple[int, int, int]] = []  # (segment, index in it, free ranks) of those with free ranks
    for c, lo, hi in classes:
        items = loads[lo:hi]
        n, pos = hi - lo, 0
        if open_:
            still = []
            for si, pi, f in open_:
                if pos < n and f >= c:
                    x, seg = items[pos], segs[si]
                    if not seg[pi] >= x:  # np.maximum(height, x)
                        seg[pi] = x
                    take = min(f // c, n - pos)
                    f -= c * take
                    pos += take
                if f > 0:
                    still.append((si, pi, f))
            open_ = still
        if pos < n:
            per = pool // c
            new = np.maximum(items[pos::per], 0.0)
            nb, s = len(new), len(segs)
            segs.append(new)
            if pool - c * per > 0:
                open_.extend((s, q, pool - c * per) for q in range(nb - 1))
            last = pool - c * (n - pos - per * (nb - 1))
            if last > 0:
                open_.append((s, nb - 1, last))
    return segs[0] if len(segs) == 1 else np.concatenate(segs)
