"""HyDra's step 3, degrees and engines (docs/hydra.md §3, §4): **the degree rule** (:func:`cell_degrees` on the
grid, :func:`sequence_degrees_many` per sequence), one planning engine per degree (:func:`planning_engines_many`)
and, after placement, **the Ulysses-inside-a-shallow-ring engine choice** (:func:`group_engines`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.specs import JobSpec
from dcpsim.cost_models.ulysses import ulysses_degrees
from dcpsim.policies.errors import PolicyError

if TYPE_CHECKING:
    from dcpsim.policies.hydra.placement import Layout
    from dcpsim.policies.hydra.target import TargetModel
    from dcpsim.policies.hydra.work import Pricer, WorkGrid

__all__ = ["allowed_degrees", "cell_degrees", "engine_options", "group_engines", "planning_engines_many",
           "sequence_degrees_many"]

OPTION_KEY = 1 << 20  # a group option (size, ulysses) as one integer: size · OPTION_KEY + ulysses


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` (flattened, sorted) through ``return_inverse``, which takes numpy's sort path: without
    it numpy ≥ 2.3 hashes integers, 0.74 against 0.10 ms at 3,000 (numpy 2.4)."""
    return np.unique(a, return_inverse=True)[0]


def engine_options(size: int, cp_engine: str, job: JobSpec) -> tuple[int, ...]:
    """Inner Ulysses degrees u that ``cp_engine`` allows for a group of ``size`` ranks (empty: none): ring →
    (1,); ulysses → (size,) when Ulysses can span the group; hybrid → the largest valid u (Ulysses inside the
    node, ring across); auto → every valid u, to be priced."""
    size = int(size)
    if size == 1 or cp_engine == "ring":
        return (1,)
    us = ulysses_degrees(job, size)
    if cp_engine == "ulysses":
        return (size,) if size in us else ()
    if cp_engine == "hybrid":
        return (max(us),)
    return us


def allowed_degrees(pool: int, mode: str, min_cp_size: int, cp_engine: str, job: JobSpec) -> np.ndarray:
    """CP degrees HyDra may use, ascending: ``pow2``, powers of two ≤ W, plus W itself when W is not a power of
    two (so that anything that fits the pool can be placed); ``any``, every integer 1..W. Both keep only degrees
    ≥ ``min_cp_size`` that the CP engine can run."""
    if mode == "pow2":
        cand = [1 << i for i in range(pool.bit_length()) if (1 << i) <= pool]
        if cand[-1] != pool:
            cand.append(pool)
    elif mode == "any":
        cand = list(range(1, pool + 1))
    else:
        raise PolicyError(f"degrees = {mode!r} is unknown; valid: pow2, any")
    if min_cp_size < 1 or min_cp_size > pool:
        raise PolicyError(f"min_cp_size = {min_cp_size} must be between 1 and the pool size {pool}")
    out = [c for c in cand if c >= min_cp_size and engine_options(c, cp_engine, job)]
    if not out:
        raise PolicyError(f"no CP degree ≥ min_cp_size = {min_cp_size} on a pool of {pool} ranks can run "
                          f"cp_engine = {cp_engine!r} (KV heads per rank {job.kv_heads_per_rank}); "
                          "use cp_engine hybrid or auto")
    return np.asarray(out, dtype=np.int64)


def cell_degrees(grid: WorkGrid, tm: TargetModel, tau):
    """The degree rule on the grid: each cell's degree index at target τ (the smallest allowed degree whose
    load alone, work + overhead, meets τ and whose tokens fit the budget; none: heavy, the degree of the
    smallest load alone) and whether the cell is heavy. For one τ: ([G], [G]); for an array of τ: ([n, G],
    [n, G])."""
    ok = grid.alone()[None, :, :] <= np.atleast_1d(tau)[:, None, None]
    heavy = np.logical_not(ok.any(axis=2))
    k = np.where(heavy, tm.heavy_k[None, :], np.argmax(ok, axis=2))
    return (k[0], heavy[0]) if np.ndim(tau) == 0 else (k, heavy)


def sequence_degrees_many(grid: WorkGrid, tm: TargetModel, taus: list[float], lengths: np.ndarray,
                          kmin: np.ndarray, pricer: Pricer) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(degree index, engine, heavy flag) of every sequence at each target τ of ``taus``. The grid gives each
    sequence the degree of the grid point at or above its length; where the point below gives a lower one, it
    is priced exactly and kept if the load alone meets τ. Sequences of heavy cells are priced at every degree
    and get the smallest one that meets τ, else the one with the smallest load (heavy)."""
    D, K, cell = grid.degrees, len(grid.degrees), grid.cell
    out = []
    for tau in taus:
        k_cell, heavy_cell = cell_degrees(grid, tm, tau)
        k = np.maximum(k_cell[cell], kmin)
        u = grid.ulysses[cell, k]
        below = np.maximum(cell - 1, 0)
        lower = np.maximum(k_cell[below], kmin)
        low = np.flatnonzero((lower < k) & ~heavy_cell[cell])  # may take the lower degree
        kl, ul = lower[low], grid.ulysses[below[low], lower[low]]
        meets = pricer.work(low, D[kl], ul) + grid.overhead[below[low], kl] <= tau
        k[low[meets]], u[low[meets]] = kl[meets], ul[meets]
        hv = np.flatnonzero(heavy_cell[cell])  # priced at every degree memory allows
        heavy = np.zeros(len(lengths), dtype=bool)
        rep_k = np.tile(np.arange(K), hv.size)
        rep_u = grid.ulysses[np.repeat(cell[hv], K), rep_k]
        ok = (np.arange(K)[None, :] >= kmin[hv][:, None]).reshape(-1)
        flat = np.full(hv.size * K, np.inf)
        c_ok, u_ok = D[rep_k[ok]], rep_u[ok]
        flat[ok] = pricer.work(np.repeat(hv, K)[ok], c_ok, u_ok) + pricer.overhead(c_ok, u_ok)
        load = flat.reshape(hv.size, K)
        fit = load <= tau
        k[hv] = np.where(fit.any(axis=1), np.argmax(fit, axis=1), np.argmin(load, axis=1))
        u[hv] = rep_u.reshape(hv.size, K)[np.arange(hv.size), k[hv]]
        heavy[hv] = ~fit.any(axis=1)
        out.append((k, u, heavy))
    return out


def planning_engines_many(items: list[tuple], lengths: np.ndarray, job: JobSpec, pricer: Pricer,
                          cp_engine: str) -> list[tuple[np.ndarray, np.ndarray, dict[tuple[int, int], float]]]:
    """Per (sizes, u_seq, heavy, τ) of ``items``: sequences of one degree share groups, so they share an engine:
    per degree, the option with the least total priced load over the light sequences of that degree (the
    groups they fill at τ, each with the option's overhead). Heavy sequences, alone in their groups, keep their
    own best. Returns per item the engines, exact shares and group overheads by (c, u)."""
    out = []
    for sizes, u_seq, heavy, tau in items:
        light = np.flatnonzero(~heavy)
        by = light[np.argsort(sizes[light], kind="stable")]  # by degree, each degree's in batch order
        # (degree, engine option, the degree's light sequences) for every option of every degree used
        ch = [(c, u, m) for c in np.unique(sizes[by]).tolist() for m in [by[sizes[by] == c]]
              for u in engine_options(c, cp_engine, job)]
        # every option's work in one read, summed option by option (np.add.reduceat: in order)
        n_of = [len(m) for _, _, m in ch]
        w_all = pricer.work(np.concatenate([m for _, _, m in ch] + [np.zeros(0, dtype=np.int64)]),
                            np.repeat([c for c, _, _ in ch], n_of), np.repeat([u for _, u, _ in ch], n_of))
        starts = (np.cumsum(n_of) - n_of).astype(np.int64)
        sums = np.add.reduceat(w_all, starts).tolist() if ch else []
        ovh = pricer.overhead(np.array([c for c, _, _ in ch], dtype=np.int64),
                              np.array([u for _, u, _ in ch], dtype=np.int64)).tolist()
        best: dict[int, tuple[float, int, np.ndarray, np.ndarray]] = {}
        t = max(tau, 1e-12)
        for (c, u, m), s_j, o_j, a in zip(ch, sums, ovh, starts.tolist()):
            q = s_j / t  # (max(1.0, nan) is 1.0)
            total = s_j + max(1.0, float(math.ceil(q)) if math.isfinite(q) else q) * o_j
            if c not in best or total < best[c][0] * (1 - 1e-12):
                best[c] = (total, u, m, w_all[a:a + len(m)])
        u_seq, shares, left = u_seq.copy(), np.empty(len(lengths)), np.ones(len(lengths), dtype=bool)
        for _, u, m, w in best.values():
            u_seq[m], shares[m], left[m] = u, w, False
        rest = np.flatnonzero(left)  # heavy sequences: their own engine's work
        shares[rest] = pricer.work(rest, sizes[rest], u_seq[rest])
        pairs = sorted_unique(sizes * OPTION_KEY + u_seq)
        o_p = pricer.overhead(pairs // OPTION_KEY, pairs % OPTION_KEY).tolist()
        out.append((u_seq, shares, {(k // OPTION_KEY, k % OPTION_KEY): x for k, x in zip(pairs.tolist(), o_p)}))
    return out


def group_engines(layout: Layout, job: JobSpec, pricer: Pricer, cp_engine: str) -> np.ndarray:
    """Inner Ulysses degree of every group: the option with the smallest priced load (planning u on ties).
    The planning engine is among the options, so a group's load never rises above what placement saw."""
    out = layout.u.copy()
    n_g = len(out)
    if not n_g:
        return out
    su = sorted_unique(layout.size)
    opts = [engine_options(c, cp_engine, job) for c in su.tolist()]
    width = max(len(o) for o in opts)
    if width <= 1:
        return out
    # each size's options in engine_options' order, padded with -1 ([sizes, width])
    utab = np.full((len(su), width), -1, dtype=np.int64)
    for i, o in enumerate(opts):
        utab[i, :len(o)] = o
    cls = np.searchsorted(su, layout.size)
    U = utab[cls]  # [groups, width]
    gm = np.flatnonzero(U[:, 1] >= 0)  # the groups with a choice
    # every sequence of those groups at each of its group's options (placement order)
    seq = layout.placed[(U[:, 1] >= 0)[layout.seq_group[layout.placed]]]
    sg = layout.seq_group[seq]
    cells = U[sg]
    valid = (cells >= 0).reshape(-1)
    work = pricer.work(np.repeat(seq, width)[valid], np.repeat(layout.size[sg], width)[valid], cells.reshape(-1)[valid])
    cell_of = (sg[:, None] * width + np.arange(width)).reshape(-1)[valid]
    # a group's load at each option: its sequences' work summed in placement order, plus the option's overhead
    # (+inf past the group's last option)
    o_tab = np.full(utab.shape, np.inf)
    have = utab >= 0
    o_tab[have] = pricer.overhead(np.broadcast_to(su[:, None], utab.shape)[have], utab[have])
    load = np.bincount(cell_of, weights=work, minlength=n_g * width).reshape(n_g, width)[gm] + o_tab[cls[gm]]
    # per group the least load; the planning engine where it is within 1e-12 of it (ties), else the first
    # option (in engine_options' order) that attains the least
    Um = U[gm]
    near = load <= (load.min(axis=1) * (1 + 1e-12))[:, None]
    planned = near & (Um == layout.u[gm][:, None])
    col = np.where(planned.any(axis=1), planned.argmax(axis=1), near.argmax(axis=1))
    out[gm] = Um[np.arange(len(gm)), col]
    return out
