"""HyDra's degrees and engines (steps 3–5 of :mod:`policies.hydra`): what each sequence and group runs at.

- :func:`sequence_degrees_many`: every sequence's degree at each target τ (the smallest allowed one whose load
  alone meets τ, exactly re-priced where the grid's cell is ambiguous) and its heavy flag.
- :func:`planning_engines_many`: one planning engine per degree (sequences of one degree share groups), the
  exact shares and the group overheads placement uses.
- :func:`group_engines`: after placement, each group's Ulysses × ring split with the least priced load.

The first two take every microbatch-count candidate at once and price what they all need in one cost-model call.
"""

from __future__ import annotations

import math

import numpy as np

from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.hydra.placement import Layout
from dcpsim.policies.hydra.target import cell_degrees
from dcpsim.policies.hydra.options import engine_option_tuple
from dcpsim.policies.hydra.pricing import OPTION_KEY, Pricer, sorted_unique

__all__ = ["group_engines", "planning_engines_many", "sequence_degrees_many"]


def sequence_degrees_many(grid, tm, taus: list[float], lengths: np.ndarray, kmin: np.ndarray, pricer: Pricer):
    """Degree index, engine and heavy flag of every sequence at each target τ of ``taus``.

    The grid gives each sequence the degree of the grid point at or above its length (enough for it);
    the point below bounds the degree from underneath, and where the two differ the lower one is priced
    exactly and kept if the sequence's load alone meets τ. Sequences the grid calls heavy are priced at
    every degree and get the smallest one that meets τ, or the one with the smallest load. What every τ
    prices is priced in one call (the same numbers: the pricer's memo prices each cell elementwise,
    whatever else a call holds)."""
    plans = [_degrees_unpriced(grid, tm, tau, kmin) for tau in taus]
    cells = [c for p in plans for c in (p[3], p[4]) if c is not None]
    if len(cells) > 1:
        pricer.work(np.concatenate([c[0] for c in cells]), np.concatenate([c[1] for c in cells]),
                    np.concatenate([c[2] for c in cells]))
    return [_degrees_priced(p, grid, tau, len(lengths), pricer) for p, tau in zip(plans, taus)]


def _degrees_unpriced(grid, tm, tau: float, kmin: np.ndarray) -> tuple:
    """The part of :func:`sequence_degrees_many` before pricing at one τ: each sequence's degree index and
    engine from the grid, the cells below each grid point, and the two sets of cells it prices, each
    (positions, sizes, u) or None: the lower degree of the sequences it may take, every memory-feasible degree
    of the heavy ones."""
    D = grid.degrees
    k_cell, heavy_cell = cell_degrees(grid, tm, tau)
    cell = grid.cell
    k = np.maximum(k_cell[cell], kmin)
    u = grid.ulysses[cell, k]
    below = np.maximum(cell - 1, 0)
    lower = np.maximum(k_cell[below], kmin)
    try_low = np.flatnonzero((lower < k) & ~heavy_cell[cell])
    low = None
    if try_low.size:
        kl = lower[try_low]
        low = (try_low, D[kl], grid.ulysses[below[try_low], kl], kl)
    hv = np.flatnonzero(heavy_cell[cell])
    high = None
    if hv.size:
        K = len(D)
        rep_k = np.tile(np.arange(K), hv.size)
        rep_u = grid.ulysses[np.repeat(cell[hv], K), rep_k]
        ok = (np.arange(K)[None, :] >= kmin[hv][:, None]).reshape(-1)  # memory allows: priced
        high = (np.repeat(hv, K)[ok], D[rep_k[ok]], rep_u[ok], hv, rep_u, ok)
    return k, u, below, low, high


def _degrees_priced(plan: tuple, grid, tau: float, n: int, pricer: Pricer):
    """:func:`sequence_degrees_many` at one τ from its unpriced part."""
    k, u, below, low, high = plan
    if low is not None:
        try_low, sizes, ul, kl = low
        w = pricer.work(try_low, sizes, ul) + grid.overhead[below[try_low], kl]
        ok = w <= tau
        k[try_low[ok]], u[try_low[ok]] = kl[ok], ul[ok]
    heavy = np.zeros(n, dtype=bool)
    if high is not None:
        pos, sizes, us, hv, rep_u, ok = high
        K = len(grid.degrees)
        flat = np.full(hv.size * K, np.inf)
        flat[ok] = pricer.work(pos, sizes, us) + pricer.overhead(sizes, us)
        load = flat.reshape(hv.size, K)
        meets = load <= tau
        k[hv] = np.where(meets.any(axis=1), np.argmax(meets, axis=1), np.argmin(load, axis=1))
        u[hv] = rep_u.reshape(hv.size, K)[np.arange(hv.size), k[hv]]
        heavy[hv] = ~meets.any(axis=1)
    return k, u, heavy


def planning_engines_many(items: list[tuple], lengths: np.ndarray, job: JobSpec, pricer: Pricer, cp_engine: str):
    """Per (sizes, u_seq, heavy, τ) of ``items``: sequences of one degree share groups, so they share an engine:
    per degree, the option with the least total priced load over the (non-heavy) sequences of that degree.
    Heavy sequences, alone in their groups, keep their own best. Returns per item the engines, exact shares and
    group overheads by (c, u); what every item prices is priced in one call (the same numbers)."""
    plans = [_engines_unpriced(sizes, heavy, job, cp_engine, pricer) for sizes, _, heavy, _ in items]
    pos, rows, at = [], [], []  # (at: where each item's options' work starts in the one call's result)
    n = 0
    for (members, reps, reps_rows, *_), (sizes, u_seq, heavy, _) in zip(plans, items):
        at.append(n)
        if reps is not None:
            pos.append(reps)
            rows.append(reps_rows)
            n += len(reps)
        rest = np.ones(len(lengths), dtype=bool)  # (what no engine choice covers: priced at its own engine)
        for m in members.values():
            rest[m] = False
        r = np.flatnonzero(rest)
        if r.size:
            pos.append(r)
            rows.append(pricer.option_rows(sizes[r], u_seq[r]))
            n += len(r)
    w_all = pricer.work_at_rows(np.concatenate(pos), np.concatenate(rows)) if pos else np.zeros(0)
    return [_engines_priced(p, sizes, u_seq, heavy, lengths, tau, pricer,
                            None if p[1] is None else w_all[a:a + len(p[1])])
            for p, (sizes, u_seq, heavy, tau), a in zip(plans, items, at)]


def _engines_unpriced(sizes: np.ndarray, heavy: np.ndarray, job: JobSpec, cp_engine: str, pricer: Pricer) -> tuple:
    """The part of :func:`planning_engines_many` before pricing for one item: the light sequences of each degree,
    and every (degree, engine) option's sequences in one array with each one's memo row (None: no options), the
    options and their counts."""
    light = np.flatnonzero(~heavy)
    sl = sizes[light]
    if len(sl) and int(sl.max()) < 1 << 15:  # (a stable sort of 16-bit keys is a radix sort: the same order)
        sl = sl.astype(np.int16)
    by = light[np.argsort(sl, kind="stable")]  # by degree, each degree's in batch order
    cs = sizes[by]
    cut = [0] + (np.flatnonzero(cs[1:] != cs[:-1]) + 1).tolist() if len(by) else []
    bounds = cut + [len(by)]
    members = {c: by[a:b] for c, a, b in zip(cs[cut].tolist() if cut else [], bounds, bounds[1:])}
    pos, opt_c, opt_u, counts = [], [], [], []
    for c, m in members.items():
        for u in engine_option_tuple(c, cp_engine, job):
            pos.append(m)
            opt_c.append(c)
            opt_u.append(u)
            counts.append(len(m))
    if not pos:
        return members, None, None, opt_c, opt_u, counts
    rows = np.repeat(pricer.option_rows(np.asarray(opt_c, dtype=np.int64), np.asarray(opt_u, dtype=np.int64)),
                     counts)
    return members, np.concatenate(pos), rows, opt_c, opt_u, counts


def _engines_priced(plan: tuple, sizes: np.ndarray, u_seq: np.ndarray, heavy: np.ndarray, lengths: np.ndarray,
                    tau: float, pricer: Pricer, w: np.ndarray | None):
    """:func:`planning_engines_many` for one item from its unpriced part and ``w``, its options' work (priced)."""
    members, reps, reps_rows, opt_c, opt_u, counts = plan
    u_seq = u_seq.copy()
    keys: set[int] = set()  # the (size, u) pairs the sequences end up with
    if opt_c:
        assert w is not None
        o = pricer.overhead(np.asarray(opt_c, dtype=np.int64), np.asarray(opt_u, dtype=np.int64)).tolist()
        n_of = np.asarray(counts, dtype=np.int64)
        starts = np.cumsum(n_of) - n_of
        sums = np.add.reduceat(w, starts).tolist()
        best: dict[int, tuple[float, int, int]] = {}
        t = max(tau, 1e-12)
        for j, (c, u, s_j, o_j) in enumerate(zip(opt_c, opt_u, sums, o)):
            q = s_j / t  # (np.ceil's number on floats; max(1.0, nan) is 1.0 as before)
            groups = max(1.0, float(math.ceil(q)) if math.isfinite(q) else q)
            total = s_j + groups * o_j
            if c not in best or total < best[c][0] * (1 - 1e-12):
                best[c] = (total, u, j)
        start = starts.tolist()
        shares = np.empty(len(lengths))
        left = np.ones(len(lengths), dtype=bool)
        for c, (_, u, j) in best.items():
            m = members[c]
            u_seq[m] = u
            keys.add(c * OPTION_KEY + u)
            shares[m] = w[start[j]:start[j] + counts[j]]  # (the chosen engine's work, priced above)
            left[m] = False
        rest_pos = np.flatnonzero(left)
        if rest_pos.size:  # heavy sequences (and any degree without engines): their own engine's work
            shares[rest_pos] = pricer.work(rest_pos, sizes[rest_pos], u_seq[rest_pos])
    else:
        shares = pricer.work(np.arange(len(lengths)), sizes, u_seq)
    rest = np.flatnonzero(heavy) if len(keys) == len(members) else None  # (None: a degree without options)
    if rest is None:
        pairs = sorted_unique(sizes * OPTION_KEY + u_seq).tolist()
    else:
        pairs = sorted(keys.union((sizes[rest] * OPTION_KEY + u_seq[rest]).tolist()))
    pk = np.asarray(pairs, dtype=np.int64)
    o_p = pricer.overhead(pk // OPTION_KEY, pk % OPTION_KEY).tolist()
    ovh = {(k // OPTION_KEY, k % OPTION_KEY): x for k, x in zip(pairs, o_p)}
    return u_seq, shares, ovh


def group_engines(layout: Layout, job: JobSpec, pricer: Pricer, cp_engine: str) -> np.ndarray:
    """Inner Ulysses degree of every group: the option with the smallest priced load (planning u on ties).
    The planning engine is among the options, so a group's load never rises above what placement saw."""
    out = layout.u.copy()
    G = len(out)
    if not G:
        return out
    su = sorted_unique(layout.size)
    opts = [engine_option_tuple(c, cp_engine, job) for c in su.tolist()]
    width = max(len(o) for o in opts)
    if width <= 1:
        return out
    # each group's options in engine_options' order, padded with -1 ([groups, width], one row per size)
    utab = np.full((len(su), width), -1, dtype=np.int64)
    for i, o in enumerate(opts):
        utab[i, :len(o)] = o
    cls = np.searchsorted(su, layout.size)
    U = utab[cls]
    gm = np.flatnonzero(U[:, 1] >= 0)  # the groups with a choice
    # every sequence of those groups priced at each of its group's options, in one call (placement order)
    seq = layout.placed[(U[:, 1] >= 0)[layout.seq_group[layout.placed]]]
    sg = layout.seq_group[seq]
    # (each size's options' memo rows, looked up once: -1 past a size's last option)
    have = utab >= 0
    have[utab[:, 1] < 0] = False
    row_tab = np.full(utab.shape, -1, dtype=np.int64)
    row_tab[have] = pricer.option_rows(np.broadcast_to(su[:, None], utab.shape)[have], utab[have])
    cells = row_tab[cls[sg]]
    valid = (cells >= 0).reshape(-1)
    work = pricer.work_at_rows(np.repeat(seq, width)[valid], cells.reshape(-1)[valid])
    cell_of = (sg[:, None] * width + np.arange(width)).reshape(-1)[valid]
    # a group's load at each option: its sequences' work summed in placement order, plus the option's overhead
    # (+inf past the group's last option)
    o_tab = np.full(utab.shape, np.inf)
    o_tab[have] = pricer.overhead(np.broadcast_to(su[:, None], utab.shape)[have], utab[have])
    load = np.bincount(cell_of, weights=work, minlength=G * width).reshape(G, width)[gm] + o_tab[cls[gm]]
    # per group the least load; the planning engine where it is within 1e-12 of it (ties), else the first
    # option (in engine_options' order) that attains the least
    Um = U[gm]
    near = load <= (load.min(axis=1) * (1 + 1e-12))[:, None]
    planned = near & (Um == layout.u[gm][:, None])
    col = np.where(planned.any(axis=1), planned.argmax(axis=1), near.argmax(axis=1))
    out[gm] = Um[np.arange(len(gm)), col]
    return out
