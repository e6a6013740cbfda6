"""The first version of HyDra's target search and 1F1B order helpers (then policies/hydra_target.py and
policies/hydra_order.py at commit 04ede44, before the speed-up), kept verbatim as the slow reference that
tests/policies/test_hydra_fast_paths.py compares the fast paths with, bit for bit. Only the names they call
are pointed at this module (``best_order``, ``makespans``) or at the unchanged helpers of the package."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dcpsim.policies.hydra.degrees import cell_degrees
from dcpsim.policies.hydra.order import FORWARD_FRACTION, RAMP_FLOORS, _schedule, ramped
from dcpsim.policies.hydra.target import (
    REFINE_MAX,
    REFINE_WITHIN,
    STOP_ABOVE,
    TOKEN_SLACK,
    TargetChoice,
    TargetModel,
    pack_heavy,
    solve_tau,
)
from dcpsim.policies.hydra.work import WorkGrid


def makespans(heights: np.ndarray, p: int, phi: float = FORWARD_FRACTION) -> np.ndarray:
    """Makespan of one pipeline column for each row of ``heights`` [C, m] (one candidate order per row),
    all rows at once: the recurrence end = max(end[dependency], end[previous]) + duration runs level by
    level over the fixed dependency structure with vector arithmetic."""
    H = np.atleast_2d(np.asarray(heights, dtype=np.float64))
    C, m = H.shape
    if m == 0:
        return np.zeros(C)
    phase, mb, _, level, dep, prev = _schedule(m, p)  # (the operations in level order: the structure only)
    dur = np.where(phase[:, None] == 0, phi, 1.0 - phi) * H.T[mb]  # [ops, C]
    end = np.zeros((len(phase) + 1, C))  # the last row stays 0: the target of "none"
    for lv in range(int(level.max()) + 1):
        ops = np.flatnonzero(level == lv)
        end[ops] = np.maximum(end[dep[ops]], end[prev[ops]]) + dur[ops]
    return end.max(axis=0)


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


class TargetSearch:
    """τ(m) for any light microbatch count m, with the heavy set resolved (module docstring). Heavy packings
    are cached by heavy set: the set changes only a few times over the range of m."""

    def __init__(self, grid: WorkGrid, tm: TargetModel, pool: int, pp: int, lengths: np.ndarray,
                 budget: float, capacity: float | None = None) -> None:
        self.grid, self.tm, self.W, self.pp = grid, tm, pool, pp
        self.W_eff = float(pool) if capacity is None else capacity  # ranks the load spreads over (speed-weighted)
        self.token_cap = TOKEN_SLACK * pool * budget  # tokens one microbatch should hold at most
        self.lengths = lengths
        self.count = np.bincount(grid.cell, minlength=len(grid.lengths)).astype(np.float64)
        self.R = np.bincount(grid.cell, weights=grid.scale, minlength=len(grid.lengths))
        self._heavy_cache: dict[bytes, tuple[np.ndarray, float, float, int]] = {}
        self._solved: dict[int, TargetChoice] = {}

    def _heavy(self, heavy_cells: np.ndarray) -> tuple[np.ndarray, float, float, int]:
        """(heights, tokens, rank-seconds excluded from the balance, free ranks) of a heavy cell set."""
        key = np.packbits(heavy_cells).tobytes()
        hit = self._heavy_cache.get(key)
        if hit is None:
            g, tm = self.grid, self.tm
            seq = np.flatnonzero(heavy_cells[g.cell])
            cell = g.cell[seq]
            k = tm.heavy_k[cell]
            share = g.work[cell, k] * g.scale[seq]
            _, heights = pack_heavy(share + g.overhead[cell, k], g.degrees[k], self.W)
            heavy_rw = float(tm.rank_work[heavy_cells, tm.heavy_k[heavy_cells]].sum())
            spare = float(self.W * heights.sum()) - float((g.degrees[k] * share).sum())
            free = int(self.W * len(heights) - g.degrees[k].sum())
            hit = (heights, float(self.lengths[seq].sum()), heavy_rw + spare, free)
            self._heavy_cache[key] = hit
        return hit

    def _structure(self, tau: float, heavy: np.ndarray) -> float:
        """Ranks the light sequences above the smallest degree occupy at τ: per degree c, c times the groups
        they need, at least one per sequence above τ/2 (no two share) and at least their load over τ."""
        g = self.grid
        k, _ = cell_degrees(g, self.tm, tau)
        rows = np.flatnonzero(~heavy & (k > 0) & (self.count > 0))
        if rows.size == 0:
            return 0.0
        kk = k[rows]
        alone = g.work[rows, kk] + g.overhead[rows, kk]
        K = len(g.degrees)
        half = np.bincount(kk, weights=self.count[rows] * (alone > tau / 2), minlength=K)
        load = np.bincount(kk, weights=self.R[rows] * g.work[rows, kk] + self.count[rows] * g.overhead[rows, kk],
                           minlength=K)
        groups = np.maximum(half, np.ceil(load / tau - 1e-9))
        return float((g.degrees * groups).sum())

    def at(self, m_light: int) -> TargetChoice:
        """The target for ``m_light`` light microbatches. When the groups its degrees ask for do not fit that
        many microbatches (⌈ranks needed / W⌉ > m), the choice keeps τ (the degree rule) and counts the
        microbatches the structure needs, at the correspondingly lower load level."""
        hit = self._solved.get(m_light)
        if hit is not None:
            return hit
        tm = self.tm
        tau = solve_tau(tm, self.W_eff, m_light)
        heavy = np.zeros(len(tm.heavy_thr), dtype=bool)
        heights, heavy_tok, free = np.zeros(0), 0.0, 0
        for _ in range(4):
            now = tm.heavy_thr > tau
            if not now.any() or (now == heavy).all():
                break
            heavy = now
            heights, heavy_tok, excluded, free = self._heavy(heavy)
            tau = solve_tau(tm, self.W_eff, m_light, excluded=excluded)
        if not heavy.any():
            heights, heavy_tok, free = np.zeros(0), 0.0, 0
        light_tokens = float(self.lengths.sum()) - heavy_tok
        need = max(int(np.ceil((self._structure(tau, heavy) - free) / self.W - 1e-9)),
                   int(np.ceil(light_tokens / self.token_cap - 1e-9)))
        m_eff, level = m_light, tau
        excluded = self._heavy(heavy)[2] if heavy.any() else 0.0
        light_work = float(tm.F[np.searchsorted(tm.thresholds, tau, side="right")]) - excluded
        if heavy.any() and need <= 0 and light_work <= self.W * tm.slot_overhead:
            m_eff, level = 0, 0.0  # the heavy microbatches' spare ranks hold the rest: no light microbatch
        elif need > m_light:  # groups or tokens need more microbatches: counted at the height τ, since
            m_eff = need       # groups of loads up to τ set the heights even where the average is lower
        hmax = float(heights.max()) if len(heights) else 0.0
        est = m_eff * level + float(heights.sum()) + (self.pp - 1) * max(level, hmax)
        ch = TargetChoice(tau, level, m_eff, len(heights), heights, light_tokens, est)
        self._solved[m_light] = ch
        return ch


def choose_target(grid: WorkGrid, tm: TargetModel, pool: int, pp: int, lengths: np.ndarray, budget: int,
                  num_microbatches: int | None = None, span: int = 8,
                  capacity: float | None = None, ramp: bool = False) -> TargetChoice:
    """The (τ, m) with the smallest 1F1B estimate; m fixed when ``num_microbatches`` is given (as far as the
    heavy sequences and the groups allow).

    Candidates: light counts m_L = 1 .. ``span`` × the memory minimum ⌈Σ L / (η·W·M)⌉ + 2p (at most 512), each
    raised to what memory and the group structure need; the search stops once the estimate exceeds the
    best by ``STOP_ABOVE`` (τ only falls with m, so degrees, communication and heavy sets only grow).
    ``capacity``: the speed-weighted pool Σ 1/f of a job with stragglers (None: W)."""
    ts = TargetSearch(grid, tm, pool, pp, lengths, budget, capacity)
    if num_microbatches is not None:  # the most light microbatches whose total with the heavy ones fits m
        for m_l in range(num_microbatches, 0, -1):
            ch = ts.at(m_l)
            if m_l + ch.m_heavy <= num_microbatches:
                return ch
        return ts.at(1)
    m_all = max(1, int(np.ceil(lengths.sum() / ts.token_cap)))
    feasible: list[TargetChoice] = []
    hi = min(512, span * m_all + 2 * pp)
    for m_l in range(1, hi + 1):
        ch = ts.at(m_l)
        feasible.append(ch)
        if ch.estimate_s > STOP_ABOVE * min(c.estimate_s for c in feasible):
            break
    if not feasible:
        return ts.at(hi)
    # With heavy microbatches, Σh + (p−1)·max h over-counts what a good order hides: score the close
    # candidates with the 1F1B recurrence at their best heavy position instead.
    floor = min(c.estimate_s for c in feasible)
    close = sorted((c.estimate_s, i) for i, c in enumerate(feasible)
                   if c.m_heavy and c.estimate_s <= REFINE_WITHIN * floor)
    refine = {i for _, i in close[:REFINE_MAX]}
    best, best_t = feasible[0], np.inf
    for i, ch in enumerate(feasible):
        t = ch.estimate_s
        if i in refine:
            light, r = ramped(ch.m_light, ch.level, pp) if ramp else (np.full(ch.m_light, ch.level), 0)
            heights = np.r_[ch.heavy_heights, light]
            heavy = np.r_[np.ones(ch.m_heavy, dtype=bool), np.zeros(ch.m_light, dtype=bool)]
            t = best_order(heights, heavy, pp, r)[1]
        if t < best_t * (1 - 1e-9):
            best, best_t = ch, t
    return replace(best, estimate_s=float(best_t))
