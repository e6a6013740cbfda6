"""HyDra's choice of the microbatch count m: τ(m) for every candidate count, the 1F1B estimate, the pick.

The target τ(m) itself, the degree rule and the heavy packing are in :mod:`policies.hydra_target`.

Structure and memory
--------------------
Groups take whole ranks (a sequence above τ/2 needs a group to itself) and a microbatch holds at most η·W·M
tokens. When either needs more light microbatches than m_L, the candidate keeps its degrees and is counted with
the microbatches it needs, at height τ.

Choosing m
----------
Non-interleaved 1F1B over microbatches of heights h_k takes about Σ_k h_k + (p − 1)·max_k h_k per stage
(uniform heights: (m + p − 1)·τ, the bubble (p−1)/(m+p−1)). HyDra evaluates this estimate for light counts
from 1 to several times the memory minimum ⌈Σ L / (η · W · M)⌉, each with its own fixed-point τ, and keeps the
smallest; candidates with heavy microbatches that come close are re-scored with the 1F1B recurrence at their
best heavy position (:mod:`policies.hydra_order`). Larger m shrinks the bubble; it also shrinks τ, which raises
degrees (more communication) and adds slot overheads, both of which F and ō carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.policies.hydra.order import best_makespans, ramped
from dcpsim.policies.hydra.target import TargetModel, alone_load, first_fit
from dcpsim.policies.hydra.work import WorkGrid

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


@dataclass(frozen=True)
class _Resolved:
    """:meth:`TargetSearch.at` of several light counts at once, as arrays (one entry per count)."""

    m: np.ndarray
    tau: np.ndarray
    level: np.ndarray
    m_eff: np.ndarray
    heavy: np.ndarray  # heavy set of each count: how many cells (the set is the cells of the highest thresholds)
    light_tokens: np.ndarray
    estimate: np.ndarray


class TargetSearch:
    """τ(m) for any light microbatch count m, with the heavy set resolved (module docstring). Heavy packings
    are kept by heavy set: the set changes only a few times over the range of m.

    Many counts are resolved at once (:meth:`many`): τ(m) for a vector of m is one [m, E] pass over the step
    function, the heavy set at τ is the cells whose threshold exceeds τ (a count: the cells sorted by
    threshold), each cell's degree at every τ its record under a running count of the records above τ, and
    the groups of every count one bincount over (count, degree); each count's numbers are those :meth:`at`
    gives it alone."""

    def __init__(self, grid: WorkGrid, tm: TargetModel, pool: int, pp: int, lengths: np.ndarray,
                 budget: float, capacity: float | None = None) -> None:
        self.grid, self.tm, self.W, self.pp = grid, tm, pool, pp
        self.budget, self.capacity = budget, capacity
        self.W_eff = float(pool) if capacity is None else capacity  # ranks the load spreads over (speed-weighted)
        self.token_cap = TOKEN_SLACK * pool * budget  # tokens one microbatch should hold at most
        self.lengths = lengths
        if tm.cell_count is not None and tm.cell_weight is not None:
            self.count, self.R = tm.cell_count, tm.cell_weight
        else:
            self.count = np.bincount(grid.cell, minlength=len(grid.lengths)).astype(np.float64)
            self.R = np.bincount(grid.cell, weights=grid.scale, minlength=len(grid.lengths))
        self._solved: dict[int, TargetChoice] = {}
        self._rows: dict[int, tuple[_Resolved, int]] = {}  # every count :meth:`many` resolved: its batch and row
        self._upper = np.concatenate([tm.thresholds, [np.inf]])
        self._lower = np.concatenate([[0.0], tm.thresholds])
        self._floor = max(tm.slot_overhead, 1e-12)
        self._records: tuple | None = None  # per cell its degree records (:meth:`_record_tables`)
        self._thr_asc = np.sort(tm.heavy_thr)
        self._thr_desc = self._thr_asc[::-1]
        self._cut = np.concatenate([[np.inf], self._thr_desc])  # a set of j cells: thresholds ≥ _cut[j]
        self._tokens = float(lengths.sum())
        self._cum: tuple[np.ndarray, ...] | None = None  # running totals over the cells by threshold
        G = len(tm.heavy_thr)  # per heavy set (by its count of cells, 0: none): what at() reads of it
        self._known = np.zeros(G + 1, dtype=bool)
        self._known[0] = True
        self._heights: list[np.ndarray] = [np.zeros(0)] * (G + 1)
        self._tok_j, self._excl_j, self._hsum_j, self._hmax_j = (np.zeros(G + 1) for _ in range(4))
        self._free_j = np.zeros(G + 1, dtype=np.int64)

    def _heavy_prep(self) -> tuple:
        """What :meth:`_heavy_of` reads, once per search: every sequence at its cell's heavy degree (load
        alone, size · share) and each cell's rank-work there; running totals over the cells by falling threshold;
        the cells and the sequences each grouped by cell rank (a heavy set of j cells is the first j cells and
        the first ``n_j[j]`` sequences there, put back in ascending order by a sort of those few), and each
        sequence's place in the packing's order. A cell's sequences share its heavy degree (its class)."""
        if self._cum is None:
            g, tm = self.grid, self.tm
            G, K = len(tm.heavy_k), len(g.degrees)
            k_seq = tm.heavy_k[g.cell]
            at = g.cell * K + k_seq  # (cell, its heavy degree) in the flat [G, K] tables
            share = g.work.ravel().take(at) * g.scale
            load = share + g.overhead.ravel().take(at)
            sized = g.degrees.take(k_seq) * share
            rw = tm.rank_work.ravel().take(np.arange(G) * K + tm.heavy_k)
            order = np.argsort(-tm.heavy_thr, kind="stable")  # the cells by falling threshold: their rank
            rank = np.empty_like(order)
            rank[order] = np.arange(G)
            seq_rank = rank[g.cell]
            tok = np.bincount(g.cell, weights=self.lengths, minlength=G)[order]
            count = np.bincount(g.cell, minlength=G)
            big = max(G, K)
            small = np.uint8 if big <= 256 else np.int16 if big < 2 ** 15 else np.int64  # radix sorts
            # the packing's order: degree falling, then load falling (a sort of the loads, then a stable
            # radix sort of the degree indices; ties in load are equal heights either way)
            by_load = np.argsort(-load)
            by_class = by_load[np.argsort((K - 1 - k_seq[by_load]).astype(small), kind="stable")]
            place = np.empty_like(by_class)
            place[by_class] = np.arange(len(by_class))
            # per heavy set (j) how many of its sequences each class holds: classes by falling degree
            # (the grid's degrees ascend strictly: one class per degree index; one cell per rank)
            used = np.bincount(tm.heavy_k, weights=count, minlength=K) > 0
            ks = np.flatnonzero(used)[::-1]
            cls = np.cumsum(used[::-1])[::-1] - 1  # degree index → its class (falling degree)
            per = np.zeros((G + 1, len(ks)), dtype=np.int64)
            per[rank + 1, cls[tm.heavy_k]] = count
            in_j = per.cumsum(axis=0)
            zero = np.zeros(1)
            self._cum = (np.concatenate([zero, np.cumsum(tok)]),
                         np.concatenate([zero, np.cumsum((self.count * g.degrees[tm.heavy_k])[order])]
                                        ).astype(np.int64),
                         in_j.tolist(), g.degrees[ks].tolist(), in_j.sum(axis=1).tolist(),
                         order, np.argsort(seq_rank.astype(small), kind="stable"), place, load[by_class],
                         sized, rw)
        return self._cum

    def _heavy_of(self, js: list[int]) -> None:
        """The heavy sets of ``js`` cells (the cells of the j highest thresholds; a tie is all in or all out)
        into the per-count arrays: the heights of their first fit (:func:`pack_sorted`, the sequences kept
        sorted the packing's way once), the tokens, the rank-seconds excluded from the balance (the cells'
        rank-work at their heavy degree plus the microbatches' spare rank-seconds), the free ranks, and the
        heights' sum and largest; tokens and sizes are whole numbers, summed once over the cells in
        threshold order. The float sums run over the set's cells and sequences in ascending order (what a
        mask over all of them lists: the same numbers)."""
        W = self.W
        for j in set(js):
            if self._known[j]:
                continue
            tok_cum, size_cum, in_j, class_ranks, n_j, cells, seqs, place, load_c, sized, rw = (
                self._heavy_prep())
            # its sequences in the packing's order, each class one run of them
            classes, lo = [], 0
            for c, n in zip(class_ranks, in_j[j]):
                if n:
                    classes.append((c, lo, lo + n))
                    lo += n
            members = seqs[:n_j[j]]
            heights = first_fit(load_c.take(np.sort(place.take(members))), classes, W)
            hsum = float(heights.sum())
            self._heights[j] = heights
            self._tok_j[j] = tok_cum[j]
            self._excl_j[j] = (float(rw.take(np.sort(cells[:j])).sum())
                               + (float(W * hsum) - float(sized.take(np.sort(members)).sum())))
            self._free_j[j] = int(W * len(heights) - size_cum[j])
            self._hsum_j[j] = hsum
            self._hmax_j[j] = float(heights.max())
            self._known[j] = True

    def _solve(self, m: np.ndarray, excluded: np.ndarray | None) -> np.ndarray:
        """:func:`solve_tau` of every count in ``m`` with its own ``excluded`` (None: nothing; F − 0 = F)."""
        tm = self.tm
        num = tm.F[None, :] if excluded is None else tm.F[None, :] - excluded[:, None]
        tau_e = num / (self.W_eff * m)[:, None] + tm.slot_overhead
        e = np.argmax(tau_e < self._upper, axis=1)
        return np.maximum(np.maximum(tau_e[np.arange(len(m)), e], self._lower[e]), self._floor)

    def _record_tables(self) -> tuple | None:
        """Per cell holding sequences its degree records (a degree whose load alone beats every smaller
        degree's; :func:`cell_degrees` takes the first that fits τ: record c, c the count of its records above
        τ, the loads falling with the degree; all above: heavy, the last record, ``heavy_k``): every record's
        cell (its position among these cells) in falling order of load, each cell's first and last record;
        per record its degree index, load alone and rank-seconds (what :meth:`_structures` sums); per cell its
        sequences and heavy threshold. None where a cell holds sequences but no record (the full rule)."""
        if self._records is None:
            g, tm = self.grid, self.tm
            G, K = len(tm.heavy_k), len(g.degrees)
            if tm.records is not None:
                rows, cols, wm = tm.records
            else:
                alone = alone_load(g)
                prev_min = np.minimum.accumulate(np.c_[np.full(G, np.inf), alone[:, :-1]], axis=1)
                rows, cols = np.nonzero(np.isfinite(alone) & (alone < prev_min) & (self.R[:, None] > 0))
                wm = alone[rows, cols]
            has = np.zeros(G, dtype=bool)
            has[rows] = True
            if not len(rows) or bool((~has & (self.count > 0)).any()):
                self._records = (None,)
            else:
                first = np.concatenate([[True], rows[1:] != rows[:-1]])
                cells = rows[first]
                starts = np.flatnonzero(first)
                down = np.argsort(-wm)  # ties: above or not τ together (any order)
                at = rows * K + cols
                self._records = (wm[down][::-1].copy(), (np.cumsum(first) - 1)[down], starts,
                                 np.concatenate([starts[1:], [len(rows)]]) - 1, cols,
                                 (g.work + g.overhead).ravel().take(at),
                                 (self.R[:, None] * g.work + self.count[:, None] * g.overhead
                                  ).ravel().take(at),
                                 self.count[cells], tm.heavy_thr[cells])
        return None if self._records[0] is None else self._records

    def _records_at(self, tau: np.ndarray, rec: tuple) -> np.ndarray:
        """[n, cells with records]: each cell's record at each τ of ``tau`` (index into the records). The
        records above τ are the first ``above`` by falling load; with the rows ordered by that count, each
        row's per-cell counts are the previous row's plus the cells of the records in between (one bincount
        over (row, cell), a running sum down the rows)."""
        asc, seg_down, starts, last = rec[:4]
        n, C = len(tau), len(starts)
        above = len(asc) - np.searchsorted(asc, tau, side="right")
        order = np.argsort(above, kind="stable")
        ranked = above[order]
        top = int(ranked[-1])
        row = np.searchsorted(ranked, np.arange(top), side="right")  # the first row each record is above
        count = np.bincount(row * C + seg_down[:top], minlength=n * C).reshape(n, C).cumsum(axis=0)
        out = np.empty_like(count)
        out[order] = np.minimum(count + starts, last)
        return out

    def _degrees_at(self, tau: np.ndarray) -> np.ndarray:
        """[n, G]: :func:`cell_degrees`'s degree index of every cell at each τ of ``tau`` (the full rule)."""
        alone = alone_load(self.grid)
        ok = alone[None, :, :] <= tau[:, None, None]
        return np.where(~ok.any(axis=2), self.tm.heavy_k[None, :], np.argmax(ok, axis=2))

    def _structures(self, tau: np.ndarray, hj: np.ndarray) -> np.ndarray:
        """:meth:`_structure` of each τ of ``tau`` with its heavy set (``hj`` cells, those of the highest
        thresholds); the per-degree sums run over the cells in ascending order (one bincount over (row,
        degree) bins; cells that do not count add nothing, so only the cells with records are listed)."""
        g = self.grid
        K, n = len(g.degrees), len(tau)
        cut = self._cut[hj][:, None]  # a heavy set of j cells: thresholds ≥ cut
        rec = self._record_tables()
        if rec is not None:
            cols, alone, rank_s, count, thr = rec[4:]
            r = self._records_at(tau, rec)
            k = cols.take(r)
            rows = (k > 0) & (thr < cut)
            w_alone, w_rank = alone.take(r), rank_s.take(r)
        else:
            G = len(self.count)
            k = self._degrees_at(tau)
            at = np.arange(G) * K + k
            rows = (k > 0) & (self.count > 0) & ~(self.tm.heavy_thr >= cut)
            count = self.count
            w_alone = (g.work + g.overhead).ravel().take(at)
            w_rank = (self.R[:, None] * g.work + self.count[:, None] * g.overhead).ravel().take(at)
        bins = (k + (np.arange(n) * K)[:, None]).ravel()
        # count · (load alone > τ/2) where the row counts, else 0 (count ≥ 0: the same numbers)
        half = np.bincount(bins, weights=np.where(rows & (w_alone > tau[:, None] / 2), count, 0.0).ravel(),
                           minlength=n * K).reshape(-1, K)
        load = np.bincount(bins, weights=np.where(rows, w_rank, 0.0).ravel(), minlength=n * K).reshape(-1, K)
        groups = np.maximum(half, np.ceil(load / tau[:, None] - 1e-9))
        return (g.degrees * groups).sum(axis=1)

    def many(self, ms: np.ndarray) -> _Resolved:
        """:meth:`at` of every count in ``ms`` (ascending or not), as arrays."""
        tm = self.tm
        ms = np.asarray(ms, dtype=np.int64)
        n = len(ms)
        tau = self._solve(ms, None)
        hj = np.zeros(n, dtype=np.int64)  # heavy set: how many cells
        excl = np.zeros(n)
        live = np.ones(n, dtype=bool)
        G = len(tm.heavy_thr)
        for _ in range(4):
            now = G - np.searchsorted(self._thr_asc, tau, side="right")  # cells with threshold > τ
            live &= (now != 0) & (now != hj)
            if not live.any():
                break
            i = np.flatnonzero(live)
            hj[i] = now[i]
            self._heavy_of(now[i].tolist())
            excl[i] = self._excl_j[now[i]]
            tau[i] = self._solve(ms[i], excl[i])
        tok, free, hsum, hmax = self._tok_j[hj], self._free_j[hj], self._hsum_j[hj], self._hmax_j[hj]
        light_tokens = self._tokens - tok
        need = np.maximum(np.ceil((self._structures(tau, hj) - free) / self.W - 1e-9),
                          np.ceil(light_tokens / self.token_cap - 1e-9)).astype(np.int64)
        light_work = tm.F[np.searchsorted(tm.thresholds, tau, side="right")] - excl
        # the heavy microbatches' spare ranks hold the rest: no light microbatch
        none = (hj > 0) & (need <= 0) & (light_work <= self.W * tm.slot_overhead)
        # groups or tokens need more microbatches: counted at the height τ, since groups of loads up to τ set
        # the heights even where the average is lower
        m_eff = np.where(none, 0, np.where(need > ms, need, ms))
        level = np.where(none, 0.0, tau)
        est = m_eff * level + hsum + (self.pp - 1) * np.maximum(level, hmax)
        out = _Resolved(ms, tau, level, m_eff, hj, light_tokens, est)
        for row, m in enumerate(ms.tolist()):
            self._rows.setdefault(m, (out, row))
        return out

    def choice(self, b: _Resolved, i: int) -> TargetChoice:
        """Entry ``i`` of a batch as a :class:`TargetChoice` (what :meth:`at` returns)."""
        m = int(b.m[i])
        hit = self._solved.get(m)
        if hit is None:
            heights = self._heights[int(b.heavy[i])] if b.heavy[i] else np.zeros(0)
            hit = TargetChoice(float(b.tau[i]), float(b.level[i]), int(b.m_eff[i]), len(heights), heights,
                               float(b.light_tokens[i]), float(b.estimate[i]))
            self._solved[m] = hit
        return hit

    def at(self, m_light: int) -> TargetChoice:
        """The target for ``m_light`` light microbatches. When the groups its degrees ask for do not fit that
        many microbatches (⌈ranks needed / W⌉ > m), the choice keeps τ (the degree rule) and counts the
        microbatches the structure needs, at the correspondingly lower load level."""
        hit = self._solved.get(m_light)
        if hit is not None:
            return hit
        row = self._rows.get(m_light)  # resolved in a batch already (the same numbers as alone)
        return self.choice(*row) if row is not None else self.choice(self.many(np.array([m_light])), 0)

    def serves(self, grid: WorkGrid, tm: TargetModel, pool: int, pp: int, lengths: np.ndarray, budget: int,
               capacity: float | None) -> bool:
        """Whether this search was built for these inputs (the same objects and numbers)."""
        return (self.grid is grid and self.tm is tm and self.lengths is lengths
                and (self.W, self.pp, self.budget, self.capacity) == (pool, pp, budget, capacity))


def choose_target(grid: WorkGrid, tm: TargetModel, pool: int, pp: int, lengths: np.ndarray, budget: int,
                  num_microbatches: int | None = None, span: int = 8,
                  capacity: float | None = None, ramp: bool = False, *,
                  search: TargetSearch | None = None) -> TargetChoice:
    """The (τ, m) with the smallest 1F1B estimate; m fixed when ``num_microbatches`` is given (as far as the
    heavy sequences and the groups allow).

    Candidates: light counts m_L = 1 .. ``span`` × the memory minimum ⌈Σ L / (η·W·M)⌉ + 2p (at most 512), each
    raised to what memory and the group structure need; the search stops once the estimate exceeds the
    best by ``STOP_ABOVE`` (τ only falls with m, so degrees, communication and heavy sets only grow).
    ``capacity``: the speed-weighted pool Σ 1/f of a job with stragglers (None: W).
    The counts are resolved in blocks (32, 32, 64, 128, …: :meth:`TargetSearch.many`; one block of 32
    costs less than two of 16, and the search runs past m = 16 on 28 of the 30 plans of the fingerprint cases)
    and scanned in order.
    ``search``: a :class:`TargetSearch` of these same inputs to resolve the counts with, and to keep what it
    resolved for the next call (HyDra re-targets a fixed m after its free pick, on the same grid and model:
    the counts and heavy sets of the first call serve the second); None: a fresh one."""
    if search is None:
        ts = TargetSearch(grid, tm, pool, pp, lengths, budget, capacity)
    elif search.serves(grid, tm, pool, pp, lengths, budget, capacity):
        ts = search
    else:
        raise ValueError("choose_target: search was built for other inputs (grid, target model, pool, pp, "
                         "lengths, budget or capacity); build TargetSearch(grid, tm, pool, pp, lengths, budget, "
                         "capacity) for these")
    if num_microbatches is not None:  # the most light microbatches whose total with the heavy ones fits m
        for m_l in range(num_microbatches, 0, -1):
            ch = ts.at(m_l)
            if m_l + ch.m_heavy <= num_microbatches:
                return ch
        return ts.at(1)
    m_all = max(1, int(np.ceil(ts._tokens / ts.token_cap)))  # the batch tokens, summed once per search
    hi = min(512, span * m_all + 2 * pp)
    resolved: list[_Resolved] = []
    est: list[float] = []
    lo, size, low = 1, 32, np.inf
    while lo <= hi:
        b = ts.many(np.arange(lo, min(hi, lo + size - 1) + 1))
        resolved.append(b)
        stop = False
        for e in b.estimate.tolist():
            est.append(e)
            low = min(low, e)
            if e > STOP_ABOVE * low:
                stop = True
                break
        if stop:
            break
        lo, size = lo + size, size if lo == 1 else 2 * size
    if not est:
        return ts.at(hi)
    at = [(b, i) for b in resolved for i in range(len(b.m))][:len(est)]
    heavy_count = [len(ts._heights[j]) for b in resolved for j in b.heavy.tolist()][:len(est)]
    # With heavy microbatches, Σh + (p−1)·max h over-counts what a good order hides: score the close
    # candidates with the 1F1B recurrence at their best heavy position instead (one recurrence sweep).
    floor = min(est)
    close = sorted((e, i) for i, e in enumerate(est) if heavy_count[i] and e <= REFINE_WITHIN * floor)
    refine = sorted(i for _, i in close[:REFINE_MAX])
    t_all = list(est)
    problems = []
    for i in refine:
        ch = ts.choice(*at[i])
        light, r = ramped(ch.m_light, ch.level, pp) if ramp else (np.full(ch.m_light, ch.level), 0)
        heavy = np.zeros(ch.m_heavy + ch.m_light, dtype=bool)
        heavy[:ch.m_heavy] = True
        problems.append((np.concatenate([ch.heavy_heights, light]), heavy, r))
    for i, t in zip(refine, best_makespans(problems, pp)):
        t_all[i] = t
    best, best_t = 0, np.inf
    for i, t in enumerate(t_all):
        if t < best_t * (1 - 1e-9):
            best, best_t = i, t
    ch = ts.choice(*at[best])
    return TargetChoice(ch.tau, ch.level, ch.m_light, ch.m_heavy, ch.heavy_heights, ch.light_tokens,
                        float(best_t))
