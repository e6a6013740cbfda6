"""HyDra's work grid: the work of a geometric grid of lengths × the allowed degrees and engines, priced in a few
cost-model calls, for choosing τ, m and degrees (:mod:`policies.hydra_target`, :mod:`policies.hydra_msearch`).

The work model itself (what one sequence costs a rank, the memoised :class:`~policies.hydra_work.Pricer`) is in
:mod:`policies.hydra_work`; with a pricer the grid's probes also narrow it to the heaviest stages, fill its
overheads and give it the rows its ``lower`` and ``estimate`` read.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.hydra.options import engine_options_of
from dcpsim.policies.hydra.pricing import (MIN_WORK_S, OPTION_KEY, Pricer, alone_time, class_times, group_overhead,
                                        prices_fixed_costs, sequence_work, sorted_unique, stage_classes_of)


@dataclass(frozen=True)
class WorkGrid:
    """Work on a geometric grid of lengths × the allowed degrees, for choosing τ, m and degrees.

    ``work[j, k]`` is the per-rank work of a sequence of ``lengths[j]`` tokens at degree ``degrees[k]`` with
    the engine ``ulysses[j, k]`` that makes its load alone (work + ``overhead[j, k]``) smallest; ``fits[j, k]``
    says whether lengths[j] / degrees[k] tokens fit the per-rank budget. Sequences map to the grid point at
    or above their length (``cell``) and carry a weight ``scale`` ≈ work(L) / work(grid point) from the local
    power law, so that sums over a cell are accurate.
    """

    lengths: np.ndarray  # [G] int64 ascending
    degrees: np.ndarray  # [K]
    ulysses: np.ndarray  # [G, K]
    overhead: np.ndarray  # [G, K]
    work: np.ndarray  # [G, K]
    fits: np.ndarray  # [G, K] bool
    cell: np.ndarray  # [n] grid index of each sequence
    scale: np.ndarray  # [n]
    # charge a group above the smallest degree its extra overhead in the target (hydra_target): on when the
    # cost model prices fixed costs (CostTerms.fixed_costs), off for the first version's model (legacy plans)
    extra_overhead: bool = True
    # [p] each stage's time as a fraction of the heaviest stage's (the loads HyDra prices), the batch's work
    # weighted mean over the probes of the smallest degree (build_grid); None: not measured (every stage 1)
    stage_scale: np.ndarray | None = None


def geomspace(lo: int, hi: int, num: int) -> np.ndarray:
    """``np.geomspace(lo, hi, num)`` for positive integers lo ≤ hi (lo < hi when num > 1), computed as numpy
    2.x computes it (10 ** linspace(log10 lo, log10 hi), the ends set to lo and hi) without its wrappers: the
    same numbers, ~10x faster at 128 points (tests/policies/test_hydra_grid_parts.py holds it to numpy's)."""
    if num == 1:
        return np.array([float(lo)])
    log_lo, log_hi = np.log10(np.float64(lo)), np.log10(np.float64(hi))
    y = np.arange(0, num, dtype=np.float64)
    y *= (log_hi - log_lo) / (num - 1)
    y += log_lo
    y[-1] = log_hi
    out = np.power(10.0, y)
    out[0], out[-1] = lo, hi
    return out


@dataclass(frozen=True)
class _Options:
    """The grid's options (every allowed degree's engines, degree by degree) and, per degree, the rows of its
    options padded to the most options of any degree (``pad``: past its last; padded with its first row)."""

    opt_k: np.ndarray  # [options] degree index
    opt_u: np.ndarray  # [options] inner Ulysses degree
    size: np.ndarray  # [options] degree
    keys: np.ndarray  # [options] size · OPTION_KEY + u, rising
    key_list: tuple[int, ...]
    first: np.ndarray  # [K] each degree's first row
    pick: np.ndarray  # [K, width] each degree's rows
    pad: np.ndarray  # [K, width] bool


def _frozen(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


@lru_cache(maxsize=256)
def _options(degrees: tuple[int, ...], cp_engine: str, kv_heads_per_rank: int, domain_ranks: int) -> _Options:
    """:class:`_Options` of ``degrees`` under ``cp_engine`` for a job with these KV heads per rank and ranks per
    NVLink domain (kept: it depends on nothing else; read-only arrays)."""
    opt_k, opt_u = [], []
    for k, c in enumerate(degrees):
        for u in engine_options_of(c, cp_engine, kv_heads_per_rank, domain_ranks):
            opt_k.append(k)
            opt_u.append(u)
    opt_k_a, opt_u_a = np.asarray(opt_k, dtype=np.int64), np.asarray(opt_u, dtype=np.int64)
    K = len(degrees)
    size = np.asarray(degrees, dtype=np.int64)[opt_k_a]
    keys = size * OPTION_KEY + opt_u_a
    ends = np.searchsorted(opt_k_a, np.arange(K + 1))
    counts = np.diff(ends)
    width = int(counts.max()) if K else 1
    off = np.arange(width)
    pad = off[None, :] >= counts[:, None]  # [K, width]
    pick = np.where(pad, ends[:-1, None], ends[:-1, None] + off[None, :])
    first = ends[:-1].copy()
    _frozen(opt_k_a, opt_u_a, size, keys, first, pick, pad)
    return _Options(opt_k_a, opt_u_a, size, keys, tuple(keys.tolist()), first, pick, pad)


@lru_cache(maxsize=256)
def _probe_layout(n_opt: int, G: int) -> tuple:
    """The probe call's layout for ``n_opt`` options on a grid of G points: (probe points, rest mask, P, R,
    each entry's index into the grid followed by the lengths 1 and 2, each entry's option, the probes' count):
    every option at every fourth point and the last, then every option at 1 and 2 tokens, then every option at
    the rest (kept: it depends on the two counts alone; read-only arrays)."""
    probe = np.arange(0, G, 4)
    if probe[-1] != G - 1:
        probe = np.append(probe, G - 1)
    P = len(probe)
    rest = np.ones(G, dtype=bool)
    rest[probe] = False
    R = G - P
    each = np.arange(n_opt)
    at = np.concatenate([np.tile(probe, n_opt), np.full(n_opt, G), np.full(n_opt, G + 1),
                         np.tile(np.flatnonzero(rest), n_opt)])
    option = np.concatenate([np.repeat(each, P), each, each, np.repeat(each, R)])
    _frozen(probe, rest, at, option)
    return probe, rest, P, R, at, option, P * n_opt + 2 * n_opt


def build_grid(lengths: np.ndarray, degrees: np.ndarray, cp_engine: str, job: JobSpec,
               cost_model: CostModel, budget: int, ratio: float = 1.05, max_points: int = 160,
               pricer: Pricer | None = None) -> WorkGrid:
    """Price a geometric grid spanning the batch's lengths at every allowed degree and engine (one call).

    With a ``pricer`` (a :class:`Pricer` of these ``lengths``), every option is first priced at every stage on
    every fourth grid point (and the last), the pricer narrowed to the stages that are the heaviest there, and
    the grid priced at those."""
    lo, hi = int(lengths.min()), int(lengths.max())
    npts = int(min(max_points, max(2, np.ceil(np.log(hi / lo) / np.log(ratio)) + 1))) if hi > lo else 1
    grid = sorted_unique(np.concatenate([np.round(geomspace(lo, hi, npts)).astype(np.int64), [lo, hi]]))
    G, K = len(grid), len(degrees)
    opts = _options(tuple(degrees.tolist()), cp_engine, job.kv_heads_per_rank,
                    max(1, job.gpu.nvlink_domain // job.tp))
    opt_u_a = opts.opt_u
    n_opt = len(opt_u_a)
    oc = opts.size
    if pricer is None:
        w_all = sequence_work(np.tile(grid, n_opt), np.repeat(oc, G), np.repeat(opt_u_a, G),
                              cost_model).reshape(n_opt, G)
        o_all = group_overhead(oc, opt_u_a, cost_model)
    else:
        probe, rest, P, R, at, all_o, n_probe = _probe_layout(n_opt, G)
        # the probes, then every option at 1 and 2 tokens (its overhead, as group_overhead prices it), then the
        # rest of the grid, option by option: the probes at one stage of each class of stages that cost the
        # same; the last stage's class (the analytic model's heaviest everywhere: the LM head and loss) prices
        # the rest of the grid too, kept if the pricer narrows to that class (else priced again at the stages
        # it keeps)
        pp = getattr(cost_model.job, "pp", 1)
        rep = stage_classes_of(cost_model)
        last = rep[pp - 1]
        classes = tuple(sorted(set(rep)))
        block = getattr(cost_model, "alone_block_totals", None)
        if block is not None:  # the same numbers as one [options, lengths] block (no per-entry gathers)
            cols = np.concatenate([grid[probe], [1, 2], grid[rest]])
            rows_b = block(cols, oc, opt_u_a, classes, tuple(None if r == last and R else P + 2 for r in classes))
            t_of = {r: np.concatenate([b[:, :P].reshape(-1), b[:, P], b[:, P + 1]]) for r, b in zip(classes, rows_b)}
            rest_last = rows_b[classes.index(last)][:, P + 2:].reshape(-1) if R else None
        else:
            rows = class_times(np.concatenate([grid, [1, 2]])[at], oc, opt_u_a, cost_model, classes,
                               tuple(None if r == last and R else n_probe for r in classes), all_o)
            t_of = {r: row[:n_probe] for r, row in zip(classes, rows)}
            rest_last = rows[classes.index(last)][n_probe:] if R else None
        t = np.stack([t_of[rep[s]] for s in range(pp)])
        pricer.narrow(t[:, :P * n_opt])
        t12 = t[:, P * n_opt:].max(axis=0)
        o_all = np.maximum(0.0, 2.0 * t12[:n_opt] - t12[n_opt:])
        pricer.set_overheads(opts.keys, o_all)
        # the work at the pricer's stages: the probes' columns are already priced (at every stage), the rest
        # of the grid too when those stages are the last one's class
        kept = tuple(range(pp)) if pricer.stages is None else pricer.stages
        ts = t[list(kept), :P * n_opt]
        iso = np.empty((n_opt, G))
        iso[:, probe] = (ts.max(axis=0) if len(ts) > 1 else ts[0]).reshape(n_opt, P)
        if R:
            if rest_last is None or any(rep[s] != last for s in kept):
                rest_last = alone_time(np.tile(grid[rest], n_opt), oc, opt_u_a, cost_model, pricer.stages,
                                       option=all_o[n_probe:])
            iso[:, rest] = rest_last.reshape(n_opt, R)
        w_all = np.maximum(MIN_WORK_S, iso - o_all[:, None])
        pricer.set_grid(grid, opts.key_list, w_all)
    alone = w_all + o_all[:, None]
    # the best option of each degree (the options of one degree are consecutive rows; first minimum on ties)
    # (one argmin over the degrees' rows padded to the most options with +inf, which never comes first)
    if opts.pick.shape[1] == 1:
        best_r = np.broadcast_to(opts.first, (G, K))
    else:
        vals = alone[opts.pick]  # [K, width, G]
        vals[opts.pad] = np.inf
        best_r = (opts.first[:, None] + np.argmin(vals, axis=1)).T  # [G, K]
    best_u = opt_u_a[best_r].astype(np.int64)
    best_w = w_all[best_r, np.arange(G)[:, None]]
    best_o = o_all[best_r]
    fits = grid[:, None] <= budget * degrees[None, :]
    # (through the pricer's sorted distinct lengths where there is one: a search of sorted keys is faster)
    # (a pricer of these lengths: its sorted distinct lengths and each length's index among them)
    by_uniq = (pricer.uniq, pricer.inv) if pricer is not None and pricer.inv.shape == lengths.shape else None
    if by_uniq is not None:
        uniq, inv = by_uniq
        cell_u = np.searchsorted(grid, uniq, side="left")
        cell = cell_u[inv]
    else:
        cell = np.searchsorted(grid, lengths, side="left")
    # Per-sequence scale from the local power law of the smallest degree's column (the exponent per grid cell).
    w0 = best_w[:, 0]
    expo_cell = np.ones(G)
    if G > 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            expo_cell[1:] = np.log(w0[1:] / w0[:-1]) / np.log(grid[1:] / grid[:-1])
    expo = expo_cell if np.isfinite(expo_cell).all() else np.nan_to_num(expo_cell, nan=1.0)
    if by_uniq is not None:  # once per distinct length (elementwise: the same numbers)
        scale = ((uniq / grid[cell_u]) ** expo[cell_u])[inv]
    else:
        scale = (lengths / grid[cell]) ** expo[cell]
    stage_scale = None
    if pricer is not None and len(t) > 1:
        # The first option's probes (the smallest degree), each stage's time over the heaviest stage's; every
        # sequence reads the probe at or above its length and counts with its work there.
        tp = t[:, :P]
        ratio_s = tp / np.maximum(tp.max(axis=0), 1e-30)  # [p, P]
        j = np.minimum(np.searchsorted(grid[probe], uniq, side="left")[inv] if by_uniq is not None
                       else np.searchsorted(grid[probe], lengths, side="left"), P - 1)
        wt = np.bincount(j, weights=w0[cell] * scale, minlength=P)
        stage_scale = ratio_s @ wt / max(float(wt.sum()), 1e-30)
    return WorkGrid(grid, degrees, best_u, best_o, best_w, fits, cell, scale,
                    extra_overhead=prices_fixed_costs(cost_model), stage_scale=stage_scale)
