"""HyDra's step 2: **the closed-form target** τ (docs/hydra.md §2) and the microbatch count m (§5).

Every one of the W ranks runs m microbatches and each (rank, microbatch) slot carries the load τ; sequence i
at degree c_i puts its per-rank work w_i(c_i) on c_i ranks and every slot pays the fixed overhead ō, so

    W · m · τ  =  Σ_i c_i · w_i(c_i)  +  W · m · ō          ⇒          τ = F(τ) / (W · m) + ō,

F(τ) the batch's rank-work including communication, which depends on τ through the degree rule (a smaller τ
asks for larger degrees). F is a step function of τ (:class:`TargetModel`); the target is the smallest
τ ≥ F(τ)/(W·m) + ō, one pass over its breakpoints (:func:`solve_tau`). A sequence whose smallest load alone
exceeds τ is *heavy*: it gets microbatches of its own (:func:`pack_heavy`, first fit) and the rest balance
over what remains, τ = (F_light(τ) − C_H)/(W · m_L) + ō.

The count m (:class:`TargetSearch`, :func:`choose_target`): groups take whole ranks and a microbatch holds at
most η·W·M tokens, so a candidate whose groups or tokens need more light microbatches than m_L keeps its τ and
counts the microbatches it needs. Light counts run from 1 to several times the memory minimum
⌈Σ L / (η·W·M)⌉; the smallest 1F1B estimate Σ_k h_k + (p − 1)·max_k h_k wins, candidates with heavy
microbatches that come close re-scored by the 1F1B recurrence at their best heavy position.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from dcpsim.policies.hydra.degrees import cell_degrees
from dcpsim.policies.hydra.order import best_order, makespan_floor
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



def solve_tau(tm: TargetModel, pool: float, m_light, excluded=None, rule: str = "fixed-point"):
    """The closed-form target: the smallest τ ≥ (F(τ) − excluded) / (W · m_light) + ō over the step function
    F, for one count (a float) or an array of counts (``excluded`` per count; None: nothing). With stragglers W is
    the effective pool Σ_w 1/f_w. ``rule="mean"`` (HyDra's ``target`` option, a researcher's variant): τ = the mean
    load per slot at every sequence's smallest load alone, (F(∞) − excluded) / (W · m_light) + ō."""
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
    with ⌊free / c⌋ of them, so a cumulative sum assigns a whole class at once (a few numpy calls per class)."""
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
            free = np.concatenate([free, np.full(extra, pool, dtype=np.int64)])
            height = np.concatenate([height, np.zeros(extra)])
            slots = free // c
        mb = np.searchsorted(np.cumsum(slots), np.arange(len(items)), side="right")
        where[items] = mb
        free = free - c * np.bincount(mb, minlength=len(free))
        np.maximum.at(height, mb, shares[items])
    return where, height


# ---- the microbatch count ----------------------------------------------------------------------------------
TOKEN_SLACK = 0.92  # η: plan for at most this fraction of the pool's token capacity
REFINE_WITHIN = 1.10  # candidates within this factor of the best Σh + (p−1)·max h get the recurrence
REFINE_MAX = 16  # ... at most this many (the closest)
STOP_ABOVE = 1.25  # the m search stops once the estimate exceeds the best so far by this factor


@dataclass(frozen=True)
class TargetChoice:
    tau: float  # load target of the light microbatches (s): the degree rule and the capacities
    level: float  # expected load of a light slot (≤ τ; < τ when the groups need more microbatches)
    m_light: int
    m_heavy: int
    heavy_heights: np.ndarray  # [m_heavy]
    light_tokens: float  # tokens of the sequences that are not heavy
    estimate_s: float  # Σ h + (p − 1) · max h, per stage


class _HeavySet(NamedTuple):
    """One heavy set's first fit and what the balance reads of it."""

    heights: np.ndarray  # its microbatches' heights
    tokens: float
    excluded: float  # rank-seconds set apart from the balance (C_H and the heavy rank-work)
    free: int  # free ranks in its microbatches
    hsum: float
    hmax: float
    cells: np.ndarray  # [G] bool: its cells


class TargetSearch:
    """τ(m) for any light microbatch count m with the heavy set resolved, many counts at once (:meth:`many`);
    each heavy set packed once (keyed by its number of cells: the cells whose threshold exceeds τ). ``rule``: how
    τ follows from F (:func:`solve_tau`)."""

    def __init__(self, grid: WorkGrid, tm: TargetModel, pool: int, pp: int, lengths: np.ndarray,
                 budget: float, capacity: float | None = None, rule: str = "fixed-point") -> None:
        self.grid, self.tm, self.W, self.pp = grid, tm, pool, pp
        self.rule = rule
        self.W_eff = float(pool) if capacity is None else capacity  # ranks the load spreads over (speed-weighted)
        self.token_cap = TOKEN_SLACK * pool * budget  # tokens one microbatch should hold at most
        self.lengths = lengths
        self.count = np.bincount(grid.cell, minlength=len(grid.lengths)).astype(np.float64)
        self.R = np.bincount(grid.cell, weights=grid.scale, minlength=len(grid.lengths))
        self._tokens = float(lengths.sum())
        self._solved: dict[int, TargetChoice] = {}
        G = len(tm.heavy_thr)
        self._heavy: dict[int, _HeavySet] = {0: _HeavySet(np.zeros(0), 0.0, 0.0, 0, 0.0, 0.0, np.zeros(G, bool))}

    def _heavy_sets(self, tau: np.ndarray) -> np.ndarray:
        """The heavy set at each τ (the cells whose smallest load alone exceeds τ), packed and kept: its key."""
        above = self.tm.heavy_thr[None, :] > tau[:, None]
        keys = above.sum(axis=1)
        for j, i in zip(*np.unique(keys, return_index=True)):
            self._pack(int(j), above[i])
        return keys

    def _pack(self, j: int, cells: np.ndarray) -> None:
        """Pack the heavy set of j cells ``cells`` [G] (once)."""
        if j not in self._heavy:
            g, tm, W = self.grid, self.tm, self.W
            K = len(g.degrees)
            seq = np.flatnonzero(cells[g.cell])  # its sequences, ascending
            k_seq = tm.heavy_k[g.cell[seq]]
            at = g.cell[seq] * K + k_seq
            share = g.work.ravel().take(at) * g.scale[seq]
            sizes = g.degrees.take(k_seq)
            _, heights = pack_heavy(share + g.overhead.ravel().take(at), sizes, W)
            hsum = float(heights.sum())
            rw = tm.rank_work.ravel().take(np.flatnonzero(cells) * K + tm.heavy_k[cells])
            # excluded from the balance: the cells' rank-work at their heavy degree and the microbatches'
            # spare rank-seconds
            excl = float(rw.sum()) + (float(W * hsum) - float((sizes * share).sum()))
            self._heavy[j] = _HeavySet(heights, float(self.lengths[seq].sum()), excl,
                                       int(W * len(heights) - sizes.sum()), hsum, float(heights.max()), cells)

    def _structures(self, tau: np.ndarray, heavy: np.ndarray) -> np.ndarray:
        """Ranks the light groups need at each τ: per degree, the groups that the sequences of that degree
        (the degree rule; heavy cells ``heavy`` [n, G] and degree 0 left out) fill at τ, at least one per
        sequence above τ/2; the per-degree sums run over the cells in ascending order."""
        g = self.grid
        K, n, G = len(g.degrees), len(tau), len(self.count)
        k, _ = cell_degrees(g, self.tm, tau)
        at = np.arange(G) * K + k
        rows = (k > 0) & (self.count > 0) & ~heavy
        w_alone = (g.work + g.overhead).ravel().take(at)
        w_rank = (self.R[:, None] * g.work + self.count[:, None] * g.overhead).ravel().take(at)
        bins = (k + (np.arange(n) * K)[:, None]).ravel()
        half = np.bincount(bins, weights=np.where(rows & (w_alone > tau[:, None] / 2), self.count, 0.0).ravel(),
                           minlength=n * K).reshape(-1, K)
        load = np.bincount(bins, weights=np.where(rows, w_rank, 0.0).ravel(), minlength=n * K).reshape(-1, K)
        groups = np.maximum(half, np.ceil(load / tau[:, None] - 1e-9))
        return (g.degrees * groups).sum(axis=1)

    def many(self, ms: np.ndarray) -> list[TargetChoice]:
        """:meth:`at` of every count in ``ms``."""
        tm = self.tm
        ms = np.asarray(ms, dtype=np.int64)
        n = len(ms)
        tau = solve_tau(tm, self.W_eff, ms, None, self.rule)
        hj = np.zeros(n, dtype=np.int64)  # heavy set of each count (its key)
        excl = np.zeros(n)
        live = np.ones(n, dtype=bool)
        for _ in range(4):  # until the heavy sets are stable
            now = self._heavy_sets(tau)
            live &= (now != 0) & (now != hj)
            if not live.any():
                break
            i = np.flatnonzero(live)
            hj[i] = now[i]
            excl[i] = [self._heavy[j].excluded for j in now[i].tolist()]
            tau[i] = solve_tau(tm, self.W_eff, ms[i], excl[i], self.rule)
        sets = [self._heavy[j] for j in hj.tolist()]
        tok, free, hsum, hmax = (np.array([getattr(h, f) for h in sets])
                                 for f in ("tokens", "free", "hsum", "hmax"))
        light_tokens = self._tokens - tok
        heavy_cells = np.array([h.cells for h in sets]).reshape(n, -1)
        need = np.maximum(np.ceil((self._structures(tau, heavy_cells) - free) / self.W - 1e-9),
                          np.ceil(light_tokens / self.token_cap - 1e-9)).astype(np.int64)
        light_work = tm.F[np.searchsorted(tm.thresholds, tau, side="right")] - excl
        # the heavy microbatches' spare ranks hold the rest: no light microbatch
        none = (hj > 0) & (need <= 0) & (light_work <= self.W * tm.slot_overhead)
        # groups or tokens need more microbatches: counted at the height τ, since groups of loads up to τ set
        # the heights even where the average is lower
        m_eff = np.where(none, 0, np.where(need > ms, need, ms))
        level = np.where(none, 0.0, tau)
        est = m_eff * level + hsum + (self.pp - 1) * np.maximum(level, hmax)
        return [self._solved.setdefault(count, TargetChoice(  # (a count resolved before keeps its choice)
            float(tau[q]), float(level[q]), int(m_eff[q]), len(sets[q].heights), sets[q].heights,
            float(light_tokens[q]), float(est[q]))) for q, count in enumerate(ms.tolist())]

    def at(self, m_light: int) -> TargetChoice:
        """The target for ``m_light`` light microbatches. When the groups its degrees ask for do not fit that
        many microbatches (⌈ranks needed / W⌉ > m), the choice keeps τ (the degree rule) and counts the
        microbatches the structure needs, at the correspondingly lower load level."""
        return self._solved[m_light] if m_light in self._solved else self.many(np.array([m_light]))[0]


def choose_target(ts: TargetSearch, num_microbatches: int | None = None, span: int = 8) -> TargetChoice:
    """The (τ, m) with the smallest 1F1B estimate through the search ``ts`` (one per plan: what it resolved is
    kept across calls); m fixed when ``num_microbatches`` is given (as far as the heavy sequences and the groups
    allow). Candidates: light counts 1 .. ``span`` × the memory minimum + 2p (at most 512), resolved in blocks of 8
    and scanned in order until the estimate exceeds the best by ``STOP_ABOVE`` (τ only falls): a block past the
    stop packs heavy sets of small τ for nothing (blocks of 32, 32, 64, …: +14% plan time at 2,048 × 256)."""
    if num_microbatches is not None:  # the most light microbatches whose total with the heavy ones fits m
        for m_l in range(num_microbatches, 0, -1):
            ch = ts.at(m_l)
            if m_l + ch.m_heavy <= num_microbatches:
                return ch
        return ts.at(1)
    hi = min(512, span * max(1, int(np.ceil(ts._tokens / ts.token_cap))) + 2 * ts.pp)

    def scanned():  # blocks of 8 counts, each resolved when the scan reaches it
        for lo in range(1, hi + 1, 8):
            yield from ts.many(np.arange(lo, min(hi, lo + 7) + 1))
    cands: list[TargetChoice] = []
    low = np.inf
    for ch in scanned():
        cands.append(ch)
        low = min(low, ch.estimate_s)
        if ch.estimate_s > STOP_ABOVE * low:
            break
    est = [ch.estimate_s for ch in cands]
    # Heavy microbatches: Σh + (p−1)·max h over-counts what a good order hides; the recurrence scores the close
    # candidates, closest first, but not one whose makespan_floor is above a final number (beyond the 1e-9 of
    # ties): it cannot be chosen. At 2,048 × 256 all five skip: plan time 0.67–0.69 → 0.48–0.62 × mcore-dcp's.
    close = sorted((e, i) for i, e in enumerate(est) if cands[i].m_heavy and e <= REFINE_WITHIN * low)[:REFINE_MAX]
    final = min(np.delete(est, [i for _, i in close]).tolist(), default=np.inf)  # (the unscored: final)
    for _, i in close:
        h = np.concatenate([cands[i].heavy_heights, np.full(cands[i].m_light, cands[i].level)])
        if makespan_floor(h, ts.pp) <= final * (1 + 2e-9):
            est[i] = best_order(h, np.arange(len(h)) < cands[i].m_heavy, ts.pp)[1]
            final = min(final, est[i])
    best = 0  # the first of the smallest
    for i, t in enumerate(est):
        if t < est[best] * (1 - 1e-9):
            best = i
    return replace(cands[best], estimate_s=float(est[best]))
