"""HyDra's placement: sequences with known degrees and shares → CP groups in microbatches.

Heavy sequences first: each opens a group in microbatches of their own (first fit by free ranks, largest
degree first); a microbatch's capacity is (1 + tolerance) times its tallest heavy load.
Phase A — the structure (sequences above the smallest degree), largest degree first, then largest share:
join the roomiest group of the class if the load stays within τ (or h; no tolerance used yet), else carve a
new group from the microbatch with the most free ranks, else join a group within the tolerance, else open a
microbatch (the bins and microbatches in sorted lists: :mod:`policies.hydra_bins`). Microbatches are carved left
to right in non-increasing sizes, so power-of-two groups land on aligned blocks (and groups of ≤ G/t ranks stay
inside a node).
Phase B — the fill (sequences of the smallest degree, largest share first: LPT over phase A's bins and every
free block; :mod:`policies.hydra_fill`). Used free blocks become groups; the result is a :class:`Layout` of
arrays.

Cost: O((n + m) log n) heap and bisection steps for n sequences and m microbatches (bins exist only where
sequences are; a search looks at most ``PROBES`` bins, or ``PROBES`` + 2 · short microbatches), times the
classes visited (usually one; at most log2 W + 2 sizes × engines); no step scans the pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dcpsim.policies.hydra.bins import Packer
from dcpsim.policies.hydra.fill import fill as fill_phase
from dcpsim.policies.hydra.target import pack_heavy


@dataclass(frozen=True)
class Layout:
    """The placed groups (arrays over groups), each sequence's group, and each microbatch's capacity."""

    mb: np.ndarray  # [G] microbatch (placement key) of each group
    first: np.ndarray  # [G] its first rank
    size: np.ndarray  # [G] its degree
    u: np.ndarray  # [G] inner Ulysses degree of its planning engine
    load: np.ndarray  # [G] its load (s): overhead + its sequences' work at (size, u)
    seq_group: np.ndarray  # [n] group of each batch position
    placed: np.ndarray  # [n] batch positions in placement order (a group lists its sequences in this order)
    caps: list[float]  # capacity of each microbatch
    heavy_mbs: int  # microbatches 0 .. heavy_mbs − 1 hold the heavy sequences
    slow: np.ndarray | None = None  # [W] the pool ranks' slow-down factors placement weighted by (None: none)

    def members(self) -> list[list[int]]:
        """Batch positions of every group's sequences, in placement order."""
        out: list[list[int]] = [[] for _ in range(len(self.mb))]
        for i, g in zip(self.placed.tolist(), self.seq_group[self.placed].tolist()):
            out[g].append(i)
        return out


def place(*, pool: int, budget: float, tau: float, tol: float, aligned: bool, lengths: np.ndarray,
          sizes: np.ndarray, ulysses: np.ndarray, shares: np.ndarray, heavy: np.ndarray, m_light: int,
          order_key: np.ndarray, overhead: dict[tuple[int, int], float], fill: tuple[int, int],
          slowdown: np.ndarray | None = None,
          fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
          fill_estimate: Callable[[np.ndarray, int, int], np.ndarray | None],
          light_heights: np.ndarray | None = None,
          prune: Callable[[list[int], list[float], list[float], int], bool] | None = None) -> Layout | None:
    """Place every sequence (positions 0..n−1).

    ``sizes``, ``ulysses``, ``shares``: each sequence's degree, planning engine and per-rank work there;
    ``heavy``: set apart; ``order_key``: tie-break (the sequence ids); ``overhead[(size, u)]``: a group's fixed
    load; ``slowdown`` ([W] or None): each pool rank's slow-down factor, dividing the capacity of its groups;
    ``fill`` = (size, u) of the fill class (the smallest degree); ``fill_work(positions, sizes, u)``
    (elementwise) prices fill sequences in another class, ``fill_estimate(positions, size, u)``
    estimates that price without pricing (or None: no estimate); ``light_heights``: the target height of each light microbatch in
    run order (None: τ for all ``m_light``); those below τ take only fill sequences (phase B); ``prune``
    (optional): called a quarter and halfway through phase A and once it is placed, with each group's
    microbatch and load so far, the microbatches' capacities and the heavy microbatch count; if it returns
    True, placement stops and returns None."""
    pk = Packer(pool, budget, tau, tol, aligned, overhead, slowdown)
    tok = lengths / sizes
    is_fill = ~heavy & (sizes == fill[0]) & (ulysses == fill[1])
    # Heavy sequences: first fit over microbatches of their own, largest degree first (aligned carving).
    hv = np.flatnonzero(heavy)
    hv = hv[np.lexsort((order_key[hv], -shares[hv], -sizes[hv]))]
    hv_load = shares[hv] + np.array([overhead[int(c), int(u)] for c, u in zip(sizes[hv], ulysses[hv])])
    where, heights = pack_heavy(hv_load, sizes[hv], pool)
    for h in heights.tolist():
        pk.new_mb(h)
    for i, k in zip(hv.tolist(), where.tolist()):
        pk.carve(k, int(sizes[i]), int(ulysses[i]), i, float(shares[i]), float(tok[i]))
    heavy_mbs = len(pk.caps)
    if light_heights is None:
        for _ in range(m_light):
            pk.new_mb()
    else:  # a height profile (hydra_order.height_profile): short microbatches are kept for the fill
        for h in np.asarray(light_heights, dtype=np.float64).tolist():
            pk.new_mb(h, exact=True)
            pk.short += h < tau
    # Phase A: the structure.
    big = np.flatnonzero(~heavy & ~is_fill)
    big = big[np.lexsort((order_key[big], -shares[big], -sizes[big]))]
    items = list(zip(big.tolist(), sizes[big].tolist(), ulysses[big].tolist(), shares[big].tolist(),
                     tok[big].tolist()))
    # A caller comparing layouts may stop here: prune(group microbatches, group loads, microbatch capacities,
    # heavy microbatches) sees the groups so far, to which the rest of phase A and the fill only add load; it
    # is asked a quarter and halfway through phase A (the largest groups come first: the candidates cut at all
    # are cut by then on the benchmark's cells, most at a quarter, docs/hydra.md §5) and at its end.
    n_a = len(items)
    cuts = (n_a // 4, n_a // 2, n_a) if prune is not None else (n_a,)
    for lo, hi in zip((0,) + cuts, cuts):
        pk.structure(items[lo:hi])
        if prune is not None and prune([b.mb for b in pk.bins], [b.load for b in pk.bins], pk.caps, heavy_mbs):
            return None
    # Phase B: the fill (hydra_fill), then the groups: phase A's bins and every free block that took a sequence.
    small = np.flatnonzero(is_fill)
    small = small[np.lexsort((order_key[small], -shares[small]))]  # largest share first, ties by id
    bins = pk.bins
    nb0 = len(bins)
    filled = fill_phase(pk, small, lengths, shares, fill, fill_work, fill_estimate)
    where = filled.where
    took = np.zeros(len(filled.mb), dtype=bool)  # the free blocks that took a sequence, ascending
    took[where] = True
    used = np.flatnonzero(took[nb0:]) + nb0
    gid = np.full(len(filled.mb), -1, dtype=np.int64)
    gid[:nb0] = np.arange(nb0)
    gid[used] = nb0 + np.arange(len(used))
    keep = np.concatenate([np.arange(nb0, dtype=np.int64), used])
    seq_group = np.full(len(lengths), -1, dtype=np.int64)
    a_pos = np.asarray([i for bn in bins for i in bn.seqs], dtype=np.int64)
    seq_group[a_pos] = np.repeat(np.arange(nb0, dtype=np.int64), [len(bn.seqs) for bn in bins])
    seq_group[small] = gid[where]
    placed = np.concatenate([a_pos, small])  # placement order
    return Layout(mb=filled.mb[keep], first=filled.first[keep],
                  size=np.concatenate([np.asarray([bn.size for bn in bins], dtype=np.int64),
                                       np.full(len(used), fill[0], dtype=np.int64)]),
                  u=np.concatenate([np.asarray([bn.u for bn in bins], dtype=np.int64),
                                    np.full(len(used), fill[1], dtype=np.int64)]),
                  load=filled.load[keep], seq_group=seq_group, placed=placed, caps=list(pk.caps),
                  heavy_mbs=heavy_mbs, slow=slowdown)
