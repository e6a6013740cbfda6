"""HyDra's step 2a, **the closed-form target** τ (docs/hydra.md §2).

Every one of the W ranks runs m microbatches and each (rank, microbatch) slot carries the load τ; sequence i
at degree c_i puts its per-rank work w_i(c_i) on c_i ranks and every slot pays the fixed overhead ō, so

    W · m · τ  =  Σ_i c_i · w_i(c_i)  +  W · m · ō          ⇒          τ = F(τ) / (W · m) + ō,

F(τ) the batch's rank-work including communication, which depends on τ through the degree rule (a smaller τ
asks for larger degrees). F is a step function of τ (:class:`TargetModel`); the target is the smallest
τ ≥ F(τ)/(W·m) + ō, one pass over its breakpoints (:func:`solve_tau`). A sequence whose smallest load alone
exceeds τ is *heavy*: it gets microbatches of its own (:func:`pack_heavy`, first fit) and the rest balance
over what remains, τ = (F_light(τ) − C_H)/(W · m_L) + ō (:mod:`policies.hydra.microbatches`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.policies.hydra.work import WorkGrid



@dataclass(frozen=True)
class TargetModel:
    """F(τ) of a batch as a step function, built once from the work grid (module docstring)."""

    thresholds: np.ndarray  # [E] ascending breakpoints
    F: np.ndarray  # [E + 1]: F[e] holds on [thresholds[e-1], thresholds[e])
    heavy_thr: np.ndarray  # [G] a cell is heavy below its smallest share
    heavy_k: np.ndarray  # [G] its degree index when heavy (argmin share)
    rank_work: np.ndarray  # [G, K] R_j · D_k · work[j, k] + count_j · D_k · (overhead[j, k] − overhead[j, 0])
    slot_overhead: float  # ō


def build_target_model(grid: WorkGrid) -> TargetModel:
    """F(τ) from the grid: per cell, its *records* (a degree whose load alone beats every smaller degree's) are
    the degrees the degree rule can give it; as τ falls past a record's load alone the cell moves to the next
    record, and F jumps by the difference of their rank-work."""
    G, K = grid.work.shape
    R = np.bincount(grid.cell, weights=grid.scale, minlength=G)
    wm = grid.alone()
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
    return TargetModel(thr, F, heavy_thr, heavy_k, rw, float(grid.overhead[0, 0]))


TARGET_RULES = ("fixed-point", "mean")  # HyDra's ``target`` option: how τ follows from F


def solve_tau(tm: TargetModel, pool: float, m_light, excluded=None, rule: str = "fixed-point"):
    """The closed-form target: the smallest τ ≥ (F(τ) − excluded) / (W · m_light) + ō over the step function
    F, for one count (a float) or an array of counts (an array; ``excluded`` per count, None: nothing). With
    stragglers W is the effective pool Σ_w 1/f_w (a rank of slow-down f carries τ/f): a full-speed rank's.

    ``rule="mean"`` (a researcher's variant, HyDra's ``target`` option): τ = the mean load per slot with
    every sequence at the degree of its smallest load alone, (F(∞) − excluded) / (W · m_light) + ō, without
    the fixed point (degrees then follow from this τ as usual)."""
    scalar = np.ndim(m_light) == 0
    m = np.atleast_1d(np.asarray(m_light))
    num = tm.F[None, :] if excluded is None else tm.F[None, :] - np.atleast_1d(excluded)[:, None]
    tau_e = num / (pool * m)[:, None] + tm.slot_overhead
    if rule == "mean":
        tau = tau_e[:, -1]
    else:
        upper = np.concatenate([tm.thresholds, [np.inf]])
        lower = np.concatenate([[0.0], tm.thresholds])
        e = np.argmax(tau_e < upper, axis=1)  # the last interval always qualifies (upper = inf)
        tau = np.maximum(tau_e[np.arange(len(m)), e], lower[e])
    tau = np.maximum(tau, max(tm.slot_overhead, 1e-12))
    return float(tau[0]) if scalar else tau


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
    for c in sorted(set(sizes.tolist()), reverse=True):
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
