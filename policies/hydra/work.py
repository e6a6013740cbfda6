"""HyDra's step 1, the work: what each sequence costs a rank at every allowed degree and engine (docs/hydra.md
§1). :class:`Pricer` is the work model of one batch, memoised; :func:`build_grid` prices the :class:`WorkGrid`
(a geometric grid of lengths × the allowed degrees and their best engines) that τ, m and the degrees are chosen
on (:mod:`.target`, :mod:`.degrees`), and narrows the pricer and gives it the rows :meth:`Pricer.estimate` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.hydra.degrees import OPTION_KEY, engine_options, sorted_unique
from dcpsim.policies.hydra.pricing import (
    MIN_WORK_S,
    block_times,
    group_overhead,
    prices_fixed_costs,
    stage_classes_of,
    stage_times,
)


class Pricer:
    """The work model of one batch, memoised: ``work(pos, sizes, ulysses)`` equals ``sequence_work`` of those
    lengths at the pricer's stages and ``overhead`` equals ``group_overhead``; one row per option (found through a
    [size, ulysses] table) over the batch's distinct lengths, each request's misses priced in one call.

    :meth:`narrow` keeps the stages that are the heaviest somewhere on the grid's probes (with the analytic model
    the last); pricing every stage instead plans the 2,048 × 256 cell 12% slower (15.8 against 13.9 ms, one
    process). :meth:`estimate` reads a class's work off the grid for the fill's ranking; pricing it instead: 24%
    slower (18.3 ms). tests/policies/test_hydra_speed.py holds the plans to a pricer that prices every request
    afresh at every stage."""

    def __init__(self, lengths: np.ndarray, cost_model: CostModel, narrow: bool = True) -> None:
        self.cost_model = cost_model
        self.uniq, self.inv = np.unique(np.asarray(lengths, dtype=np.int64), return_inverse=True)
        self.stages: tuple[int, ...] | None = None  # None: every stage
        self.may_narrow = narrow
        self._lut = np.full((1, 1), -1, dtype=np.int64)  # [size, ulysses] → its row of the memo (-1: none)
        self._keys: list[int] = []  # each row's option key
        self._tab = np.full((8, len(self.uniq)), np.nan)  # [rows, distinct lengths] work (NaN: not priced)
        self._ovh: dict[int, float] = {}  # option key → overhead
        self._est: dict[int, np.ndarray] = {}  # option key → estimate at every distinct length
        self._grid_rows: dict[int, np.ndarray] = {}

    def narrow(self, stage_times: np.ndarray) -> None:
        """Price the work from now on only at the stages that are the heaviest in some column of
        ``stage_times`` ([p, probes], every stage)."""
        if self.may_narrow and len(stage_times) > 1 and stage_times.shape[1]:
            heaviest = np.bincount(np.argmax(stage_times, axis=0), minlength=len(stage_times))
            self.stages = tuple(np.flatnonzero(heaviest).tolist())  # (ascending, each once)

    def set_overheads(self, keys: np.ndarray, overheads: np.ndarray) -> None:
        """Known overheads (keys size · OPTION_KEY + ulysses), priced as :func:`group_overhead` prices them."""
        self._ovh.update(zip(np.asarray(keys).tolist(), np.asarray(overheads, dtype=np.float64).tolist()))

    def overhead(self, sizes, ulysses) -> np.ndarray:
        """Group overhead (s) of each (size, ulysses) pair (arrays broadcast; the result is flat)."""
        keys = (np.asarray(sizes, dtype=np.int64) * OPTION_KEY + np.asarray(ulysses, dtype=np.int64)).ravel().tolist()
        miss = sorted(set(keys).difference(self._ovh))
        if miss:
            mk = np.asarray(miss, dtype=np.int64)
            self.set_overheads(mk, group_overhead(mk // OPTION_KEY, mk % OPTION_KEY, self.cost_model))
        return np.array([self._ovh[k] for k in keys], dtype=np.float64)

    def _rows(self, sizes: np.ndarray, ulysses: np.ndarray) -> np.ndarray:
        """The memo row of each option (int64 arrays that broadcast), rows added for options not seen yet."""
        if sizes.max() >= self._lut.shape[0] or ulysses.max() >= self._lut.shape[1]:
            lut = np.full((max(int(sizes.max()) + 1, self._lut.shape[0]),
                           max(int(ulysses.max()) + 1, self._lut.shape[1])), -1, dtype=np.int64)
            lut[:self._lut.shape[0], :self._lut.shape[1]] = self._lut
            self._lut = lut
        rows = self._lut[sizes, ulysses]
        if (rows < 0).any():
            for k in sorted_unique(np.broadcast_to(sizes * OPTION_KEY + ulysses, rows.shape)[rows < 0]).tolist():
                if len(self._keys) == len(self._tab):
                    self._tab = np.concatenate([self._tab, np.full_like(self._tab, np.nan)])
                self._lut[k // OPTION_KEY, k % OPTION_KEY] = len(self._keys)
                self._keys.append(k)
            rows = self._lut[sizes, ulysses]
        return rows

    def work(self, pos: np.ndarray, sizes, ulysses) -> np.ndarray:
        """Per-rank work (s) of the sequences at batch positions ``pos`` (elementwise; scalars broadcast)."""
        pos = np.asarray(pos, dtype=np.int64)
        if len(pos) == 0:
            return np.zeros(0)
        row = np.broadcast_to(self._rows(np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64)),
                              pos.shape)
        li = self.inv[pos]
        vals = self._tab[row, li]
        miss = np.isnan(vals)
        if miss.any():
            n = len(self.uniq)
            cell = sorted_unique((row * n + li)[miss])  # each missing cell once
            r, j = cell // n, cell % n
            keys = np.array(self._keys, dtype=np.int64)  # every row's option
            iso = stage_times(self.uniq[j], keys // OPTION_KEY, keys % OPTION_KEY, self.cost_model, self.stages,
                              option=r)
            ovh = self.overhead(keys // OPTION_KEY, keys % OPTION_KEY)
            self._tab[r, j] = np.maximum(MIN_WORK_S, iso - ovh[r])
            vals = self._tab[row, li]
        return vals

    def set_grid(self, grid: np.ndarray, keys: list[int], work: np.ndarray) -> None:
        """Keep the grid's work ([options, G] at the lengths ``grid``) for :meth:`estimate`: the rows that are
        non-decreasing in the length (work grows with the tokens)."""
        rising = np.all(np.diff(work, axis=1) >= 0, axis=1).tolist()
        self._grid_rows = {k: w for k, w, up in zip(keys, work, rising) if up}
        self._log_grid = np.log(grid.astype(np.float64))
        self._log_len = np.log(self.uniq.astype(np.float64))

    def estimate(self, pos: np.ndarray, size: int, ulysses: int) -> np.ndarray | None:
        """``work(pos, size, ulysses)`` read off the grid without pricing: the local power law between the
        grid points around each length, i.e. linear interpolation in log-log (exact at grid points; the grid
        spans the batch's lengths), where the grid's work is non-decreasing, else None. Placement ranks
        candidate groups with it and prices only what it places."""
        key = int(size) * OPTION_KEY + int(ulysses)
        row = self._grid_rows.get(key)
        if row is None:
            return None
        if key not in self._est:  # every distinct length at once (elementwise: the numbers of pricing ``pos``)
            logs = np.log(np.maximum(row, MIN_WORK_S))
            self._est[key] = np.exp(np.interp(self._log_len, self._log_grid, logs))
        return self._est[key][self.inv[np.asarray(pos, dtype=np.int64)]]


@dataclass(frozen=True)
class WorkGrid:
    """Work on a geometric grid of lengths × the allowed degrees: ``work[j, k]`` of a sequence of ``lengths[j]``
    tokens at degree ``degrees[k]`` with the engine ``ulysses[j, k]`` whose load alone (work + ``overhead``) is the
    smallest; ``fits``: whether it fits the per-rank budget. Each sequence maps to the grid point at or above its
    length (``cell``) with a weight ``scale`` ≈ work(L) / work(grid point) from the local power law."""

    lengths: np.ndarray  # [G] int64 ascending
    degrees: np.ndarray  # [K]
    ulysses: np.ndarray  # [G, K]
    overhead: np.ndarray  # [G, K]
    work: np.ndarray  # [G, K]
    fits: np.ndarray  # [G, K] bool
    cell: np.ndarray  # [n] grid index of each sequence
    scale: np.ndarray  # [n]
    # charge a group above the smallest degree its extra overhead in the target: on when the cost model prices
    # fixed costs (CostTerms.fixed_costs), off for the first version's model (legacy plans)
    extra_overhead: bool = True
    # [p] each stage's time as a fraction of the heaviest stage's, the batch's work-weighted mean over the
    # probes of the smallest degree; None: not measured (one stage)
    stage_scale: np.ndarray | None = None

    def alone(self) -> np.ndarray:
        """[G, K] load of a group holding only that sequence (work + overhead); inf where memory forbids."""
        return np.where(self.fits, self.work + self.overhead, np.inf)


def build_grid(lengths: np.ndarray, degrees: np.ndarray, cp_engine: str, job: JobSpec,
               cost_model: CostModel, budget: int, ratio: float = 1.05, max_points: int = 160,
               pricer: Pricer | None = None) -> WorkGrid:
    """Price a geometric grid spanning the batch's lengths at every allowed degree and engine. Every option is
    priced at every stage class on every fourth grid point (and the last) and at 1 and 2 tokens (its overhead),
    the pricer (a :class:`Pricer` of these ``lengths``; None: a fresh one) narrowed to the stages that are the
    heaviest at those probes, and the rest of the grid priced at those stages (the last stage's class prices
    the rest in the same call: kept when the pricer narrows to it)."""
    pricer = Pricer(lengths, cost_model) if pricer is None else pricer
    lo, hi = int(lengths.min()), int(lengths.max())
    npts = int(min(max_points, max(2, np.ceil(np.log(hi / lo) / np.log(ratio)) + 1))) if hi > lo else 1
    grid = sorted_unique(np.concatenate([np.round(np.geomspace(lo, hi, npts)).astype(np.int64), [lo, hi]]))
    G, K = len(grid), len(degrees)
    opt = [(k, u) for k, c in enumerate(degrees.tolist()) for u in engine_options(c, cp_engine, job)]
    opt_k, opt_u = np.array(opt, dtype=np.int64).reshape(-1, 2).T
    oc, n_opt = degrees[opt_k], len(opt)
    probe = sorted_unique(np.append(np.arange(0, G, 4), G - 1))  # every fourth grid point and the last
    rest = np.setdiff1d(np.arange(G), probe)
    P, R = len(probe), G - len(probe)
    pp = cost_model.job.pp
    rep = stage_classes_of(cost_model)
    last = rep[pp - 1]
    classes = tuple(sorted(set(rep)))
    cols = np.concatenate([grid[probe], [1, 2], grid[rest]])
    blocks = dict(zip(classes, block_times(cols, oc, opt_u, cost_model, classes,
                                           tuple(None if r == last and R else P + 2 for r in classes))))
    t = np.stack([blocks[rep[s]][:, :P + 2] for s in range(pp)])  # [p, options, probes + 2]
    pricer.narrow(t[:, :, :P].reshape(pp, -1))
    t12 = t[:, :, P:].max(axis=0)
    o_all = np.maximum(0.0, 2.0 * t12[:, 0] - t12[:, 1])
    pricer.set_overheads(oc * OPTION_KEY + opt_u, o_all)
    kept = tuple(range(pp)) if pricer.stages is None else pricer.stages
    iso = np.empty((n_opt, G))
    iso[:, probe] = t[list(kept), :, :P].max(axis=0)
    if R:
        if any(rep[s] != last for s in kept):
            iso[:, rest] = stage_times(np.tile(grid[rest], n_opt), oc, opt_u, cost_model, pricer.stages,
                                       option=np.repeat(np.arange(n_opt), R)).reshape(n_opt, R)
        else:
            iso[:, rest] = blocks[last][:, P + 2:]
    w_all = np.maximum(MIN_WORK_S, iso - o_all[:, None])
    pricer.set_grid(grid, (oc * OPTION_KEY + opt_u).tolist(), w_all)
    # the best option of each degree (the options of one degree are consecutive rows; first minimum on ties)
    alone = w_all + o_all[:, None]
    best_r = np.empty((G, K), dtype=np.int64)
    for k in range(K):
        rows = np.flatnonzero(opt_k == k)
        best_r[:, k] = rows[np.argmin(alone[rows], axis=0)]
    best_u = opt_u[best_r]
    best_w = w_all[best_r, np.arange(G)[:, None]]
    best_o = o_all[best_r]
    fits = grid[:, None] <= budget * degrees[None, :]
    cell = np.searchsorted(grid, lengths, side="left")
    # Per-sequence scale from the local power law of the smallest degree's column (the exponent per grid cell).
    w0 = best_w[:, 0]
    expo = np.ones(G)
    if G > 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            expo[1:] = np.log(w0[1:] / w0[:-1]) / np.log(grid[1:] / grid[:-1])
    expo = np.nan_to_num(expo, nan=1.0)
    scale = (lengths / grid[cell]) ** expo[cell]
    stage_scale = None
    if pp > 1:
        # The first option's probes (the smallest degree), each stage's time over the heaviest stage's; every
        # sequence reads the probe at or above its length and counts with its work there.
        tp = t[:, 0, :P]
        ratio_s = tp / np.maximum(tp.max(axis=0), 1e-30)  # [p, P]
        j = np.minimum(np.searchsorted(grid[probe], lengths, side="left"), P - 1)
        wt = np.bincount(j, weights=w0[cell] * scale, minlength=P)
        stage_scale = ratio_s @ wt / max(float(wt.sum()), 1e-30)
    return WorkGrid(grid, degrees, best_u, best_o, best_w, fits, cell, scale,
                    extra_overhead=prices_fixed_costs(cost_model), stage_scale=stage_scale)
