"""HyDra's degrees and engines (steps 3–5 of :mod:`policies.hydra`): what each sequence and group runs at.

- :func:`sequence_degrees`: every sequence's degree at target τ (the smallest allowed one whose load alone meets
  τ, exactly re-priced where the grid's cell is ambiguous) and its heavy flag.
- :func:`planning_engines`: one planning engine per degree (sequences of one degree share groups), the exact
  shares and the group overheads placement uses.
- :func:`group_engines`: after placement, each group's Ulysses × ring split with the least priced load.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.hydra_placement import Layout
from dcpsim.policies.hydra_target import cell_degrees
from dcpsim.policies.hydra_work import OPTION_KEY, Pricer, engine_options, sorted_unique

__all__ = ["group_engines", "planning_engines", "sequence_degrees"]


def sequence_degrees(grid, tm, tau: float, lengths: np.ndarray, kmin: np.ndarray, pricer: Pricer):
    """Degree index, engine and heavy flag of every sequence at target τ.

    The grid gives each sequence the degree of the grid point at or above its length (enough for it);
    the point below bounds the degree from underneath, and where the two differ the lower one is priced
    exactly and kept if the sequence's load alone meets τ. Sequences the grid calls heavy are priced at
    every degree and get the smallest one that meets τ, or the one with the smallest load."""
    D = grid.degrees
    k_cell, heavy_cell = cell_degrees(grid, tm, tau)
    cell = grid.cell
    k = np.maximum(k_cell[cell], kmin)
    u = grid.ulysses[cell, k]
    below = np.maximum(cell - 1, 0)
    lower = np.maximum(k_cell[below], kmin)
    try_low = np.flatnonzero((lower < k) & ~heavy_cell[cell])
    if try_low.size:
        kl, ul = lower[try_low], grid.ulysses[below[try_low], lower[try_low]]
        w = pricer.work(try_low, D[kl], ul) + grid.overhead[below[try_low], kl]
        ok = w <= tau
        k[try_low[ok]], u[try_low[ok]] = kl[ok], ul[ok]
    hv = np.flatnonzero(heavy_cell[cell])
    heavy = np.zeros(len(lengths), dtype=bool)
    if hv.size:
        K = len(D)
        rep_k = np.tile(np.arange(K), hv.size)
        rep_u = grid.ulysses[np.repeat(cell[hv], K), rep_k]
        ok = (np.arange(K)[None, :] >= kmin[hv][:, None]).reshape(-1)  # memory allows: priced
        flat = np.full(hv.size * K, np.inf)
        flat[ok] = (pricer.work(np.repeat(hv, K)[ok], D[rep_k[ok]], rep_u[ok])
                    + pricer.overhead(D[rep_k[ok]], rep_u[ok]))
        load = flat.reshape(hv.size, K)
        meets = load <= tau
        k[hv] = np.where(meets.any(axis=1), np.argmax(meets, axis=1), np.argmin(load, axis=1))
        u[hv] = rep_u.reshape(hv.size, K)[np.arange(hv.size), k[hv]]
        heavy[hv] = ~meets.any(axis=1)
    return k, u, heavy


def planning_engines(sizes: np.ndarray, u_seq: np.ndarray, heavy: np.ndarray, lengths: np.ndarray,
                     tau: float, job: JobSpec, pricer: Pricer, cp_engine: str):
    """Sequences of one degree share groups, so they share an engine: per degree, the option with the
    least total priced load over the (non-heavy) sequences of that degree. Heavy sequences, alone in
    their groups, keep their own best. Returns engines, exact shares and group overheads by (c, u)."""
    u_seq = u_seq.copy()
    light = np.flatnonzero(~heavy)
    by = light[np.argsort(sizes[light], kind="stable")]  # by degree, each degree's in batch order
    cs = sizes[by]
    cut = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]]) if len(by) else np.zeros(0, dtype=np.int64)
    members = {c: by[a:b] for c, a, b in zip(cs[cut].tolist(), cut.tolist(), np.r_[cut[1:], len(by)].tolist())}
    pos, opt = [], []
    for c, m in members.items():
        for u in engine_options(c, cp_engine, job):
            pos.append(m)
            opt.append((c, u))
    if opt:
        reps = np.concatenate(pos)
        counts = [len(p) for p in pos]
        opt_c = np.asarray([c for c, _ in opt], dtype=np.int64)
        opt_u = np.asarray([u for _, u in opt], dtype=np.int64)
        w = pricer.work(reps, np.repeat(opt_c, counts), np.repeat(opt_u, counts))
        o = pricer.overhead(opt_c, opt_u)
        ends = np.cumsum(counts)
        sums = np.add.reduceat(w, np.r_[0, ends[:-1]])
        best: dict[int, tuple[float, int, int]] = {}
        for j, (c, u) in enumerate(opt):
            groups = max(1.0, np.ceil(sums[j] / max(tau, 1e-12)))
            total = float(sums[j] + groups * o[j])
            if c not in best or total < best[c][0] * (1 - 1e-12):
                best[c] = (total, u, j)
        for c, (_, u, _) in best.items():
            u_seq[members[c]] = u
    shares = pricer.work(np.arange(len(lengths)), sizes, u_seq)
    pairs = sorted_unique(sizes * OPTION_KEY + u_seq)
    o = pricer.overhead(pairs // OPTION_KEY, pairs % OPTION_KEY)
    ovh = {(int(k) // OPTION_KEY, int(k) % OPTION_KEY): float(x) for k, x in zip(pairs.tolist(), o.tolist())}
    return u_seq, shares, ovh


def group_engines(layout: Layout, job: JobSpec, pricer: Pricer, cp_engine: str) -> np.ndarray:
    """Inner Ulysses degree of every group: the option with the smallest priced load (planning u on ties).
    The planning engine is among the options, so a group's load never rises above what placement saw."""
    out = layout.u.copy()
    G = len(out)
    opts_of = {c: engine_options(c, cp_engine, job) for c in sorted_unique(layout.size).tolist()}
    multi = {c: o for c, o in opts_of.items() if len(o) > 1}
    if not multi or not G:
        return out
    # one row per (group, option) of the groups with a choice: its sequences priced there, in one call
    g_opt, u_opt = [], []
    for c, opts in multi.items():
        gs = np.flatnonzero(layout.size == c)
        g_opt.append(np.repeat(gs, len(opts)))
        u_opt.append(np.tile(np.asarray(opts, dtype=np.int64), len(gs)))
    og, ou = np.concatenate(g_opt), np.concatenate(u_opt)  # each group's rows are contiguous, in option order
    first_row = np.full(G, len(og), dtype=np.int64)
    np.minimum.at(first_row, og, np.arange(len(og)))
    nopt = np.zeros(G, dtype=np.int64)
    np.add.at(nopt, og, 1)
    seq = layout.placed[nopt[layout.seq_group[layout.placed]] > 0]
    sg = layout.seq_group[seq]
    k = nopt[sg]
    rows = np.repeat(first_row[sg], k) + (np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k))
    work = pricer.work(np.repeat(seq, k), layout.size[og[rows]], ou[rows])
    load = np.bincount(rows, weights=work, minlength=len(og)) + pricer.overhead(layout.size[og], ou)
    # per group the least load; the planning engine where it is within 1e-12 of it (ties), else the first
    # option (in engine_options' order) that attains the least
    least = np.full(G, np.inf)
    np.minimum.at(least, og, load)
    near = load <= least[og] * (1 + 1e-12)
    pick = np.where(near & (ou == layout.u[og]), 0, np.where(near, 1, 2))  # 0: planning u, 1: a least, 2: no
    key = np.lexsort((np.arange(len(og)), pick, og))  # per group its best row first
    first = key[np.r_[True, og[key][1:] != og[key][:-1]]]
    out[og[first]] = ou[first]
    return out
