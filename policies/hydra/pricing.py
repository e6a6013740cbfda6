"""HyDra's work model: what one sequence costs a rank, priced by the cost model in a few vectorised calls.

Every number HyDra balances is a *per-rank, per-stage time in seconds* (forward + backward, compute plus
exposed CP communication) read from ``CostModel.group_costs``. The cost model prices CP *groups*; HyDra needs
a price per *sequence* so that it can add sequences to groups one at a time. The two are reconciled by
splitting a group's time into a fixed part and per-sequence parts:

    time(group of c ranks, engine u, sequences S)  ≈  overhead(c, u)  +  Σ_{L ∈ S} work(L | c, u)

* ``overhead(c, u)`` is what a group costs before it holds any tokens: the GEMMs' fixed cost (the analytic
  model's GEMM time is affine in tokens per rank, k·(x + x½)), the latency terms of the engine's
  collectives, and the cost model's fixed costs (per layer, per ring step: r − 1 of them, per microbatch). It is read off the cost model by linear extrapolation to zero tokens from two tiny probes:
  overhead = 2·time(1 token) − time(2 tokens).
* ``work(L | c, u)`` = time(L alone in the group) − overhead(c, u): the linear layers' L/c share, the
  sequence's own attention (quadratic, at the kernel efficiency of its own blocks), and its communication.

For the analytic model the split is exact for GEMMs, attention and Ulysses all-to-alls (all affine or additive
per sequence) and conservative for the ring: a packed group's ring exposure is max(0, transfer − compute) of
the group's *totals*, which is at most the sum of the sequences' own exposures (a long sequence's attention
hides a short one's transfer). Pricing sequences in isolation without subtracting the overhead would charge
a 1K-token document the GEMMs' fixed cost on its own (≈ +19% at 1K tokens): short-document ranks would
look busier than they are and end up idle in the simulator.

Groups are priced as if they started at pool rank 0, at the stage where they cost most (every stage is
priced; the first and last add the embedding and the LM head with the loss). For power-of-two degrees on aligned blocks
that is exactly where the cost model puts them (an aligned block of ≤ G/t ranks stays in one node); groups
of ``degrees="any"`` may straddle a node boundary that the estimate does not see.

:func:`rank_loads` prices a finished plan with this same model; it is the load the property tests bound.
The planner prices through a :class:`Pricer` (one per batch): the same numbers, each distinct (length, size,
engine) priced once, at the stages that can be the heaviest (tests/policies/test_hydra_speed.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.base import CostModel, GroupBatch
from dcpsim.policies.plan import Plan

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

MIN_WORK_S = 1e-12  # a priced share is never zero: every sequence costs something


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` by a sort (numpy ≥ 2.3 hashes integers without return_inverse: ~15× slower at a few
    thousand); the same sorted values."""
    a = np.sort(a, axis=None)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size > 1 else a


def stage_classes_of(cost_model: CostModel) -> tuple[int, ...]:
    """Each pipeline stage's class: the first stage that costs the same numbers (AnalyticCostModel.stage_classes;
    every stage its own for a cost model that does not say)."""
    f = getattr(cost_model, "stage_classes", None)
    return tuple(f()) if f is not None else tuple(range(getattr(cost_model.job, "pp", 1)))


def stage_totals(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
            stage: int) -> np.ndarray:
    """[n]: time (s) of each length alone in a group of ``sizes`` ranks (inner Ulysses ``ulysses``) at ``stage``
    (the cost model's ``alone_total_s`` where it has one: the same numbers without a GroupBatch)."""
    alone = getattr(cost_model, "alone_total_s", None)
    if alone is not None:
        return alone(lengths, sizes, ulysses, stage)
    n = len(lengths)
    gb = GroupBatch(seq_len=np.asarray(lengths, dtype=np.int64), seq_group=np.arange(n, dtype=np.int64),
                    size=np.asarray(sizes, dtype=np.int64), ulysses=np.asarray(ulysses, dtype=np.int64),
                    first_rank=np.zeros(n, dtype=np.int64))
    return np.asarray(cost_model.group_costs(gb, stage).total_s, dtype=np.float64)


def class_times(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
                stages: tuple[int, ...] | None = None, prefix: tuple[int | None, ...] | None = None,
                option: np.ndarray | None = None) -> list[np.ndarray]:
    """Time (s) of each length alone in a group of ``sizes`` ranks with inner Ulysses degree ``ulysses``, one
    row per class of ``stages`` that cost the same (:func:`stage_classes_of`; None: every pipeline stage), in
    one cost-model call (the cost model's ``alone_stage_totals``, else one call per class). Row i prices the
    first ``prefix[i]`` lengths (None: all); with ``option``, ``sizes`` and ``ulysses`` are per option and
    length j is priced at option ``option[j]``."""
    if stages is None:
        stages = tuple(range(getattr(cost_model.job, "pp", 1)))
    rep = stage_classes_of(cost_model)
    classes = tuple(dict.fromkeys(rep[s] for s in stages))
    several = getattr(cost_model, "alone_stage_totals", None)
    if several is not None:  # the work the stages share priced once
        return several(lengths, sizes, ulysses, classes, prefix, option)
    if option is not None:
        sizes, ulysses = np.asarray(sizes)[option], np.asarray(ulysses)[option]
    ks = prefix or (None,) * len(classes)
    return [stage_totals(lengths[:k], sizes[:k], ulysses[:k], cost_model, c) for c, k in zip(classes, ks)]


def alone_time(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
           stages: tuple[int, ...] | None = None, *, option: np.ndarray | None = None) -> np.ndarray:
    """Time (s) of each length alone in a group of ``sizes`` ranks with inner Ulysses degree ``ulysses``, at
    the pipeline stage where it is largest (the first stage adds the embedding, the last the LM head and
    loss: 1F1B runs at the pace of the heaviest stage). ``stages``: the stages to look at (None: all);
    ``option``: as in :func:`class_times`."""
    if len(lengths) == 0:
        return np.zeros(0)
    rows = class_times(lengths, sizes, ulysses, cost_model, stages, option=option)
    t = rows[0]
    for row in rows[1:]:  # (a max is exact: any order gives the same numbers)
        t = np.maximum(t, row)
    return t


OPTION_KEY_BITS = 20
OPTION_KEY = 1 << OPTION_KEY_BITS  # a group option (size, ulysses) as one integer: size · OPTION_KEY + ulysses


def prices_fixed_costs(cost_model: CostModel) -> bool:
    """Whether the cost model prices the per-layer, per-ring-step and per-microbatch fixed costs
    (``CostTerms.fixed_costs``; models without terms do). Off (``--cost-terms legacy``), HyDra plans as its
    first version did: no extra-overhead share in the target, no height profile, one microbatch count."""
    return bool(getattr(getattr(cost_model, "terms", None), "fixed_costs", True))


def group_overhead(sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel) -> np.ndarray:
    """Fixed time (s) of a group of ``sizes`` ranks with engine ``ulysses``: its cost at zero tokens,
    extrapolated from probes of 1 and 2 tokens (never negative)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    ulysses = np.asarray(ulysses, dtype=np.int64)
    key = sizes * OPTION_KEY + ulysses
    uniq, inv = np.unique(key, return_inverse=True)
    us_, uu = uniq >> OPTION_KEY_BITS, uniq & (OPTION_KEY - 1)
    k = len(uniq)
    t = alone_time(np.r_[np.ones(k, dtype=np.int64), np.full(k, 2, dtype=np.int64)], np.r_[us_, us_], np.r_[uu, uu],
               cost_model)
    return np.maximum(0.0, 2.0 * t[:k] - t[k:])[inv]


def sequence_work(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                  cost_model: CostModel) -> np.ndarray:
    """Per-rank work (s) of each sequence in a group of ``sizes`` ranks with engine ``ulysses``: its time
    alone minus the group's fixed overhead (module docstring). Elementwise over the three arrays."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0:
        return np.zeros(0)
    iso = alone_time(lengths, sizes, ulysses, cost_model)
    return np.maximum(MIN_WORK_S, iso - group_overhead(sizes, ulysses, cost_model))


LOWER_SAFETY = 0.98  # Pricer.lower: margin below the grid's work (a screen, never a price)


class Pricer:
    """The work model of one batch, memoised: every distinct (length, size, engine) is priced once.

    ``work(pos, sizes, ulysses)`` equals ``sequence_work(lengths[pos], sizes, ulysses)`` and ``overhead`` equals
    :func:`group_overhead`; each call prices only what no earlier call priced, all of it in one cost-model call
    (:func:`class_times`). Sequences of equal length share their price. Overheads are read at every stage. The work is
    read at ``stages``: every stage until :meth:`narrow` keeps those that are the heaviest somewhere on a
    probe set (:func:`policies.hydra_grid.build_grid` probes every option on a geometric subgrid of the batch's lengths); with the
    analytic model that is the last stage (the LM head and loss make it the heaviest everywhere), a quarter of
    the pricing at p = 4. ``narrow=False`` keeps every stage: the reference path the tests compare with.
    """

    def __init__(self, lengths: np.ndarray, cost_model: CostModel, narrow: bool = True) -> None:
        self.cost_model = cost_model
        self.uniq, self.inv = np.unique(np.asarray(lengths, dtype=np.int64), return_inverse=True)
        self.stages: tuple[int, ...] | None = None  # None: every stage
        self.may_narrow = narrow
        # The memo: one row per option (size, ulysses), one column per distinct length, and which are priced.
        # Rows are found through a dense look-up table indexed [size, ulysses] (-1: no row yet), so a request
        # costs a few array passes whatever the number of options in it.
        # [rows, distinct lengths] work (s); a row's stride is a power of two (entry = row << shift | length)
        self._shift = max(len(self.uniq) - 1, 1).bit_length()
        # (allocated by the first rows: the grid's options at once, one table; only the flags are cleared)
        self._tab = np.empty((0, 1 << self._shift))
        self._known = np.zeros((0, 1 << self._shift), dtype=bool)  # [rows, distinct lengths] priced yet
        self._tab_ovh = np.full(0, np.nan)  # [rows] group overhead (s)
        self._row_key = np.zeros(0, dtype=np.int64)  # [rows] size · OPTION_KEY + ulysses
        self._rows = 0
        self._lut = np.full((1, 1), -1, dtype=np.int64)  # [size, ulysses] → row
        self._lack = False  # rows were added whose overhead may be unknown (NaN)
        # (the stages the work is priced at, the stage classes priced for them): set on first pricing
        self._classes: tuple[tuple[int, ...] | None, tuple[int, ...]] | None = None

    def _new_rows(self, keys: np.ndarray) -> None:
        """Give each of ``keys`` (distinct, not yet known; int64) a row of the memo."""
        if not keys.size:
            return
        need = self._rows + len(keys)
        if need > len(self._row_key):
            cap = max(need, 2 * len(self._row_key), 8)
            tab = np.empty((cap, self._tab.shape[1]))
            tab[:self._rows] = self._tab[:self._rows]
            known = np.zeros((cap, self._tab.shape[1]), dtype=bool)
            known[:self._rows] = self._known[:self._rows]
            self._known = known
            ovh = np.full(cap, np.nan)
            ovh[:self._rows] = self._tab_ovh[:self._rows]
            rk = np.zeros(cap, dtype=np.int64)
            rk[:self._rows] = self._row_key[:self._rows]
            self._tab, self._tab_ovh, self._row_key = tab, ovh, rk
        c, u = keys // OPTION_KEY, keys % OPTION_KEY
        shape = (max(int(c.max()) + 1, self._lut.shape[0]), max(int(u.max()) + 1, self._lut.shape[1]))
        if shape != self._lut.shape:
            lut = np.full(shape, -1, dtype=np.int64)
            lut[:self._lut.shape[0], :self._lut.shape[1]] = self._lut
            self._lut = lut
        self._lut[c, u] = np.arange(self._rows, need)
        self._row_key[self._rows:need] = keys
        self._rows = need
        self._lack = True

    def _row_of(self, size: int, ulysses: int) -> int:
        lut = self._lut
        if size >= lut.shape[0] or ulysses >= lut.shape[1] or lut[size, ulysses] < 0:
            self._new_rows(np.array([size * OPTION_KEY + ulysses], dtype=np.int64))
        return int(self._lut[size, ulysses])

    def _rows_of(self, sizes: np.ndarray, ulysses: np.ndarray) -> np.ndarray:
        """Memo row of each (size, ulysses) pair (int64 arrays ≥ 1 that broadcast together; rows are added for
        pairs not seen yet)."""
        lut = self._lut
        if sizes.size == 0 or ulysses.size == 0:
            return np.zeros(np.broadcast(sizes, ulysses).shape, dtype=np.int64)
        try:  # (sizes and ulysses are ≥ 1: an index past the table raises, none wraps around)
            rows = lut[sizes, ulysses]
        except IndexError:
            rows = None
        if rows is not None and int(rows.min()) >= 0:
            return rows
        keys = sorted_unique(sizes * OPTION_KEY + ulysses)
        c, u = keys // OPTION_KEY, keys % OPTION_KEY
        known = (c < lut.shape[0]) & (u < lut.shape[1])
        known[known] = lut[c[known], u[known]] >= 0
        self._new_rows(keys[~known])
        return self._lut[sizes, ulysses]

    def set_grid(self, grid: np.ndarray, keys: Sequence[int], work: np.ndarray) -> None:
        """Keep the grid's work ([options, G] at the lengths ``grid``, option keys ``keys``) for :meth:`lower`."""
        self._grid = grid
        rising = np.all(np.diff(work, axis=1) >= 0, axis=1).tolist()
        self._grid_rows = {k: w for k, w, up in zip(keys, work, rising) if up}
        # for estimate(): the grid and the batch's distinct lengths in logs, each row's log work when first asked
        self._log_grid = np.log(grid.astype(np.float64))
        self._log_len = np.log(self.uniq.astype(np.float64))
        self._est_rows: dict[int, np.ndarray] = {}  # key → the estimate at every distinct length

    def lower(self, pos: np.ndarray, size: int, ulysses: int) -> np.ndarray | None:
        """A lower bound of ``work(pos, size, ulysses)`` without pricing: ``LOWER_SAFETY`` × the work at the
        grid point at or below each length, where the grid's work is non-decreasing in the length (work
        grows with the tokens: GEMMs, attention and the exposed communication max(compute, transfer) all do);
        None where there is no such row."""
        row = getattr(self, "_grid_rows", {}).get(int(size) * OPTION_KEY + int(ulysses))
        if row is None:
            return None
        j = np.searchsorted(self._grid, self.uniq[self.inv[np.asarray(pos, dtype=np.int64)]], side="right") - 1
        return LOWER_SAFETY * row[np.maximum(j, 0)]

    def estimate(self, pos: np.ndarray, size: int, ulysses: int) -> np.ndarray | None:
        """``work(pos, size, ulysses)`` read off the grid without pricing: the local power law between the
        grid points around each length, i.e. linear interpolation in log-log (exact at grid points; the grid
        spans the batch's lengths, so nothing is extrapolated), where the grid's work is non-decreasing, else
        None. Placement ranks candidate groups with it and prices only what it places."""
        key = int(size) * OPTION_KEY + int(ulysses)
        row = getattr(self, "_grid_rows", {}).get(key)
        if row is None:
            return None
        est = self._est_rows.get(key)
        if est is None:  # every distinct length at once (elementwise: the numbers of pricing only ``pos``)
            logs = np.log(np.maximum(row, MIN_WORK_S))
            est = self._est_rows[key] = np.exp(np.interp(self._log_len, self._log_grid, logs))
        return est[self.inv[np.asarray(pos, dtype=np.int64)]]

    def narrow(self, stage_times: np.ndarray) -> None:
        """Price the work from now on only at the stages that are the heaviest in some column of
        ``stage_times`` ([p, probes], every stage)."""
        if self.may_narrow and len(stage_times) > 1 and stage_times.shape[1]:
            heaviest = np.bincount(np.argmax(stage_times, axis=0), minlength=len(stage_times))
            self.stages = tuple(np.flatnonzero(heaviest).tolist())  # (ascending, each once)

    def set_overheads(self, keys: np.ndarray, overheads: np.ndarray) -> None:
        """Known overheads (keys size · 2^20 + ulysses), priced as :func:`group_overhead` prices them."""
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        if keys.size:
            if self._rows == 0 and bool((keys[1:] > keys[:-1]).all()):  # a fresh memo, keys rising (the grid's)
                self._new_rows(keys)  # (the rows _rows_of would give them: sorted distinct keys in order)
                rows = np.arange(len(keys))
            else:
                rows = self._rows_of(keys // OPTION_KEY, keys % OPTION_KEY)  # (may grow the memo)
            self._tab_ovh[rows] = np.asarray(overheads, dtype=np.float64)
            self._lack = True  # (a NaN given here is priced at the next pricing, as a new row's)

    def _overhead_rows(self, rows: np.ndarray) -> np.ndarray:
        """Overhead of the options at memo ``rows``, priced (all missing ones in one call) where not known."""
        o = self._tab_ovh[rows]
        miss = np.isnan(o)
        if np.count_nonzero(miss):
            need = sorted_unique(rows[miss])
            k = self._row_key[need]
            self._tab_ovh[need] = group_overhead(k // OPTION_KEY, k % OPTION_KEY, self.cost_model)
            o = self._tab_ovh[rows]
        return o

    def overhead(self, sizes: np.ndarray, ulysses: np.ndarray) -> np.ndarray:
        """Group overhead (s) of each (size, ulysses) pair (arrays broadcast; the result is flat)."""
        if np.ndim(sizes) == 0 and np.ndim(ulysses) == 0:
            return self._overhead_rows(np.array([self._row_of(int(sizes), int(ulysses))]))
        s = np.asarray(sizes, dtype=np.int64)
        u = np.asarray(ulysses, dtype=np.int64)
        return self._overhead_rows(self._rows_of(s, u).reshape(-1))

    def work(self, pos: np.ndarray, sizes: np.ndarray | int, ulysses: np.ndarray | int) -> np.ndarray:
        """Per-rank work (s) of the sequences at batch positions ``pos`` (elementwise; scalars broadcast)."""
        pos = np.asarray(pos, dtype=np.int64)
        n = len(pos)
        if n == 0:
            return np.zeros(0)
        li = self.inv[pos]
        sh = self._shift
        if np.ndim(sizes) == 0 and np.ndim(ulysses) == 0:
            flat = li + (self._row_of(int(sizes), int(ulysses)) << sh)
        else:
            rows = self._rows_of(np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64))
            flat = ((rows if rows.shape == (n,) else np.broadcast_to(rows, (n,))) << sh) + li
        return self._read(flat)

    def option_rows(self, sizes: np.ndarray, ulysses: np.ndarray) -> np.ndarray:
        """The memo row of each (size, ulysses) pair (int arrays that broadcast together), for
        :meth:`work_at_rows` (rows are added for pairs not seen yet)."""
        return self._rows_of(np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64))

    def work_at_rows(self, pos: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``work(pos, sizes, ulysses)`` with the options given by their :meth:`option_rows` (one per position):
        a caller that repeats a few options over many sequences looks them up once."""
        pos = np.asarray(pos, dtype=np.int64)
        if len(pos) == 0:
            return np.zeros(0)
        return self._read((np.asarray(rows, dtype=np.int64) << self._shift) + self.inv[pos])

    def _read(self, flat: np.ndarray) -> np.ndarray:
        """The memo's cells ``flat`` (row << shift | length), the missing ones priced first."""
        known = self._known.reshape(-1)  # (views: the memo is C-contiguous)
        priced = known[flat]
        if not priced.all():
            self._price(flat[~priced], known)
        return self._tab.reshape(-1)[flat]

    def _price(self, flat_miss: np.ndarray, known: np.ndarray) -> None:
        """Price the memo cells ``flat_miss`` (row << shift | length; repeats allowed) in one cost-model call
        (every stage class of ``stages`` at once, :func:`class_times`) and mark them known."""
        tab = self._tab.reshape(-1)
        m = len(flat_miss)
        if m > 1:
            # each cell once: the position whose own index survives a scatter into the memo's unpriced cells
            # (their values are overwritten below; any order prices the same numbers)
            at = np.arange(m, dtype=np.float64)
            tab[flat_miss] = at
            need = flat_miss[tab[flat_miss] == at]
        else:
            need = flat_miss
        sh = self._shift
        r, j = need >> sh, need & ((1 << sh) - 1)
        k = self._row_key[:self._rows]  # every row's option, each priced length at its row's
        cm = self.cost_model
        if self._classes is None or self._classes[0] != self.stages:
            stages = tuple(range(getattr(cm.job, "pp", 1))) if self.stages is None else self.stages
            rep = stage_classes_of(cm)
            self._classes = (self.stages, tuple(dict.fromkeys(rep[s] for s in stages)))
        several = getattr(cm, "alone_stage_totals", None)
        if several is not None:  # (class_times' call)
            rows = several(self.uniq[j], k >> OPTION_KEY_BITS, k & (OPTION_KEY - 1), self._classes[1], None, r)
        else:
            rows = class_times(self.uniq[j], k >> OPTION_KEY_BITS, k & (OPTION_KEY - 1), cm, self.stages, option=r)
        iso = rows[0]
        for row in rows[1:]:  # (alone_time's maximum: exact in any order)
            iso = np.maximum(iso, row)
        if self._lack:  # rows added since the last pricing may lack their overhead (they are all in r)
            lack = np.flatnonzero(np.isnan(self._tab_ovh[:self._rows]))
            if lack.size:
                self._overhead_rows(lack)
            self._lack = False
        tab[need] = np.maximum(MIN_WORK_S, iso - self._tab_ovh[r])
        known[need] = True


# ---- the load of a finished plan ---------------------------------------------------------------------------
def rank_loads(plan: Plan, batch: GlobalBatch, cost_model: CostModel) -> np.ndarray:
    """[microbatch, rank]: the load (s, per stage, forward + backward) of every pool rank under HyDra's work
    model: each group's overhead plus its sequences' work at the group's size and engine. Idle ranks: 0."""
    ids = np.asarray(batch.seq_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    lengths = np.asarray(batch.lengths, dtype=np.int64)
    g_size: list[int] = []
    g_u: list[int] = []
    g_mb: list[int] = []
    s_id: list[int] = []
    s_g: list[int] = []
    m_rank: list[int] = []
    m_g: list[int] = []
    gi = 0
    for k, mb in enumerate(plan.microbatches):
        for g in mb.groups:
            g_size.append(g.size)
            g_u.append(g.engine.ulysses)
            g_mb.append(k)
            s_id.extend(g.seq_ids)
            s_g.extend([gi] * len(g.seq_ids))
            m_rank.extend(g.ranks)
            m_g.extend([gi] * g.size)
            gi += 1
    size, uu, sg = np.asarray(g_size, dtype=np.int64), np.asarray(g_u, dtype=np.int64), np.asarray(s_g, dtype=np.int64)
    pos = order[np.searchsorted(ids[order], np.asarray(s_id, dtype=np.int64))] if s_id else np.zeros(0, np.int64)
    work = sequence_work(lengths[pos], size[sg], uu[sg], cost_model) if len(pos) else np.zeros(0)
    gload = np.bincount(sg, weights=work, minlength=gi) + (group_overhead(size, uu, cost_model) if gi else 0.0)
    out = np.zeros((plan.num_microbatches, plan.pool_size))
    if gi:
        mg = np.asarray(m_g, dtype=np.int64)
        out[np.asarray(g_mb, dtype=np.int64)[mg], np.asarray(m_rank, dtype=np.int64)] = gload[mg]
    return out
