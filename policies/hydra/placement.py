"""HyDra's step 4, **the placement**: sequences with known degrees and shares → CP groups in microbatches.

Every CP group is a *bin* with a load (s: its overhead plus its sequences' work at its size and engine), a
token count per rank (≤ the budget M) and a capacity: (1 + tolerance) · τ, or (1 + tolerance) · h in a
microbatch of a heavy sequence of height h > τ. Bins of one (size, engine) form a *class*, kept as a sorted
list of (load − capacity, bin): most room first (``bisect``). Microbatches sit in one more sorted list, by free
ranks, and are carved left to right in non-increasing sizes, so power-of-two groups land on aligned blocks.

1. Heavy sequences open groups in microbatches of their own (first fit by free ranks, largest degree first).
2. Phase A, the structure (sequences above the smallest degree, largest degree first, then largest share):
   join the roomiest group of the class if the load stays within τ (or h), else carve a new group from the
   microbatch with the most free ranks, else join a group within the tolerance, else open a microbatch.
3. Phase B, the fill (the smallest degree's sequences, :mod:`policies.hydra.fill`); used free blocks become
   groups. The result is a :class:`Layout` of arrays.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from dcpsim.policies.hydra.fill import Fill
from dcpsim.policies.hydra.fill import fill as fill_phase
from dcpsim.policies.hydra.target import pack_heavy

PROBES = 8  # bins passed over per class and sequence when only the token budget fails


@dataclass(slots=True)
class Bin:
    """One CP group under construction."""

    mb: int
    first: int
    size: int
    u: int  # inner Ulysses degree of the planning engine
    cap: float
    load: float
    tokens: float = 0.0  # per rank
    seqs: list[int] = field(default_factory=list)  # positions in the batch


class Packer:
    """The bins and microbatches of one placement: each microbatch's capacity and carving cursor, each class's
    bins sorted by room, the microbatches sorted by free ranks (module docstring)."""

    def __init__(self, pool: int, budget: float, tau: float, tol: float, aligned: bool,
                 overhead: dict[tuple[int, int], float], slow: np.ndarray | None = None) -> None:
        self.W, self.M, self.tau, self.tol, self.aligned = pool, budget, tau, tol, aligned
        self.overhead = overhead
        self.slow = slow  # [W] each pool rank's slow-down factor (stragglers); None: every rank at full speed
        self.bins: list[Bin] = []
        self.caps: list[float] = []
        self.cursor: list[int] = []
        self.classes: dict[tuple[int, int], list[tuple[float, int]]] = {}  # sorted (load − cap, bin) per class
        self.free: list[tuple[int, float, int]] = []  # sorted (−free ranks, −cap, mb): most free ranks first
        self.short = 0  # microbatches below τ (a height profile's ramps)

    def new_mb(self, height: float = 0.0, exact: bool = False) -> int:
        """A new microbatch of capacity (1 + tol) · max(τ, height), or (1 + tol) · height if ``exact``."""
        k = len(self.caps)
        self.caps.append((1.0 + self.tol) * (height if exact else max(self.tau, height)))
        self.cursor.append(0)
        insort(self.free, (-self.W, -self.caps[k], k))
        return k

    def slowest(self, first: int, size: int) -> float:
        """The largest slow-down factor of ranks first .. first + size − 1 (1 without stragglers): a group
        runs at its slowest member's pace (sim.engine), so its capacity is the microbatch's over this."""
        return 1.0 if self.slow is None else float(self.slow[first:first + size].max())

    def fits_block(self, k: int, size: int) -> bool:
        c = self.cursor[k]
        return self.W - c >= size and (not self.aligned or c % size == 0)

    def carve(self, k: int, size: int, u: int, pos: int, work: float, tokens: float) -> None:
        """A new group of ``size`` ranks at microbatch k's cursor holding the sequence at ``pos``."""
        c0, mcap = self.cursor[k], self.caps[k]
        cap = mcap if self.slow is None else mcap / self.slowest(c0, size)
        b = Bin(k, c0, size, u, cap, self.overhead[size, u] + work, 0.0 + tokens, [pos])
        del self.free[bisect_left(self.free, (c0 - self.W, -mcap, k))]
        insort(self.free, (size + c0 - self.W, -mcap, k))
        self.cursor[k] = c0 + size
        self.bins.append(b)
        insort(self.classes.setdefault((size, u), []), (b.load - cap, len(self.bins) - 1))

    def add(self, gid: int, pos: int, work: float, tokens: float) -> None:
        b = self.bins[gid]
        entries = self.classes[b.size, b.u]
        del entries[bisect_left(entries, (b.load - b.cap, gid))]
        b.seqs.append(pos)
        b.load += work
        b.tokens += tokens
        insort(entries, (b.load - b.cap, gid))

    def best_in_class(self, cls: tuple[int, int], work: float, tokens: float, strict: bool) -> int | None:
        """The roomiest bin of class ``cls`` = (size, u) that takes ``work`` and ``tokens`` within its capacity
        (capacity / (1 + tol), i.e. τ or h, if ``strict``): the bins in order of room, passing over at most
        ``PROBES`` that lack only the tokens."""
        lim, div = self.M * (1 + 1e-12), 1.0 + self.tol
        for _key, gid in self.classes.get(cls, [])[:PROBES]:
            b = self.bins[gid]
            if b.load + work > (b.cap / div if strict else b.cap):
                return None  # (a roomier bin could not take it: none further can)
            if b.tokens + tokens <= lim:
                return gid
        return None

    def structure(self, items: Iterable[tuple[int, int, int, float, float]]) -> None:
        """Phase A (module docstring, step 2) over (position, size, u, work, tokens) items. A microbatch to carve
        from must hold the load at its height: short ones of a height profile are passed over, at most ``PROBES``
        + 2 · their number looked at."""
        div, limit = 1.0 + self.tol, PROBES + 2 * self.short
        for i, c, u, w, t in items:
            gid = self.best_in_class((c, u), w, t, strict=True)
            if gid is not None:
                self.add(gid, i, w, t)
                continue
            load = self.overhead[c, u] + w
            at = -1  # the microbatch to carve from
            for n, (nf, ncap, k) in enumerate(self.free):  # (−free ranks, −capacity, microbatch)
                if n >= limit or -nf < c:
                    break
                if self.fits_block(k, c) and (not self.short or load <= -ncap / div * (1 + 1e-12)):
                    at = k
                    break
            gid = None if at >= 0 else self.best_in_class((c, u), w, t, strict=False)
            if gid is not None:
                self.add(gid, i, w, t)
            else:
                self.carve(self.new_mb() if at < 0 else at, c, u, i, w, t)

    def free_blocks(self, k: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """First ranks and capacities of microbatch k's free blocks of ``size`` ranks (aligned when carving is)."""
        c0 = self.cursor[k]
        if not self.fits_block(k, size):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        first = np.arange(c0, self.W - size + 1, size, dtype=np.int64)
        if self.slow is None:
            return first, np.full(len(first), self.caps[k])
        return first, self.caps[k] / self.slow[first[:, None] + np.arange(size)].max(axis=1)


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


@dataclass(slots=True)
class Structure:
    """A placement during phase A (:func:`structure`): its bins so far, the phase-A items left, the fill's inputs."""

    pk: Packer
    heavy_mbs: int
    todo: list[tuple[int, int, int, float, float]]
    small: np.ndarray  # the fill sequences, in fill order
    lengths: np.ndarray
    shares: np.ndarray
    fill: tuple[int, int]

    def advance(self) -> None:
        """The rest of phase A."""
        self.pk.structure(self.todo)
        self.todo = []


def place(*, fill_work: Callable, fill_estimate: Callable, **kw) -> Layout:
    """Place every sequence: :func:`structure`, then :func:`finish`."""
    return finish(structure(**kw), fill_work, fill_estimate)


def structure(*, pool: int, budget: float, tau: float, tol: float, aligned: bool, lengths: np.ndarray,
              sizes: np.ndarray, ulysses: np.ndarray, shares: np.ndarray, heavy: np.ndarray, m_light: int,
              order_key: np.ndarray, overhead: dict[tuple[int, int], float], fill: tuple[int, int],
              slowdown: np.ndarray | None = None, light_heights: np.ndarray | None = None) -> Structure:
    """The heavy sequences and a quarter of phase A (positions 0..n−1). ``sizes``, ``ulysses``, ``shares``: each
    one's degree, planning engine and per-rank work; ``heavy``: set apart; ``order_key``: tie-break (the ids);
    ``overhead[(size, u)]``: a group's fixed load; ``fill``: (size, u) of the fill class; ``light_heights``:
    each light microbatch's target height in run order (None: τ for all ``m_light``)."""
    pk = Packer(pool, budget, tau, tol, aligned, overhead, slowdown)
    tok = lengths / sizes
    is_fill = ~heavy & (sizes == fill[0]) & (ulysses == fill[1])
    hv = np.flatnonzero(heavy)  # first fit over microbatches of their own, largest degree first
    hv = hv[np.lexsort((order_key[hv], -shares[hv], -sizes[hv]))]
    hv_load = shares[hv] + np.array([overhead[c, u] for c, u in zip(sizes[hv].tolist(), ulysses[hv].tolist())])
    where, heights = pack_heavy(hv_load, sizes[hv], pool)
    for h in heights.tolist():
        pk.new_mb(h)
    for i, k in zip(hv.tolist(), where.tolist()):
        pk.carve(k, int(sizes[i]), int(ulysses[i]), i, float(shares[i]), float(tok[i]))
    heavy_mbs = len(pk.caps)
    for h in [None] * m_light if light_heights is None else np.asarray(light_heights, dtype=np.float64).tolist():
        pk.new_mb() if h is None else pk.new_mb(h, exact=True)  # a height profile: short ones keep to the fill
        pk.short += h is not None and h < tau
    big = np.flatnonzero(~heavy & ~is_fill)  # phase A
    big = big[np.lexsort((order_key[big], -shares[big], -sizes[big]))]
    items = list(zip(big.tolist(), sizes[big].tolist(), ulysses[big].tolist(), shares[big].tolist(), tok[big].tolist()))
    pk.structure(items[:len(items) // 4])  # the largest groups first: a quarter tells most (docs/hydra.md §5)
    small = np.flatnonzero(is_fill)  # phase B, largest share first, ties by id
    small = small[np.lexsort((order_key[small], -shares[small]))]
    return Structure(pk, heavy_mbs, items[len(items) // 4:], small, lengths, shares, fill)


def finish(st: Structure, fill_work: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
           fill_estimate: Callable[[np.ndarray, int, int], np.ndarray | None]) -> Layout:
    """The rest of phase A and phase B, the fill (:func:`policies.hydra.fill.fill`), of a :func:`structure`."""
    st.advance()
    nb0 = len(st.pk.bins)
    filled = fill_phase(st.pk, st.small, st.lengths, st.shares, st.fill, fill_work, fill_estimate)
    return _layout(st.pk, nb0, filled, st.small, st.fill, len(st.lengths), st.heavy_mbs)


def _layout(pk: Packer, nb0: int, filled: Fill, small: np.ndarray, fill: tuple[int, int], n: int,
            heavy_mbs: int) -> Layout:
    """The groups: phase A's ``nb0`` bins and every free block that took a fill sequence."""
    bins, where = pk.bins, np.asarray(filled.where, dtype=np.int64)
    took = np.zeros(len(filled.mb), dtype=bool)  # the free blocks that took a sequence, ascending
    took[where] = True
    used = np.flatnonzero(took[nb0:]) + nb0
    gid = np.full(len(filled.mb), -1, dtype=np.int64)
    gid[:nb0] = np.arange(nb0)
    gid[used] = nb0 + np.arange(len(used))
    keep = np.concatenate([np.arange(nb0, dtype=np.int64), used])
    seq_group = np.full(n, -1, dtype=np.int64)
    a_pos = np.asarray([i for bn in bins for i in bn.seqs], dtype=np.int64)
    seq_group[a_pos] = np.repeat(np.arange(nb0, dtype=np.int64), [len(bn.seqs) for bn in bins])
    seq_group[small] = gid[where]
    mb, first, load = (np.asarray(x)[keep] for x in (filled.mb, filled.first, filled.load))
    return Layout(mb=mb, first=first, load=load, seq_group=seq_group, placed=np.concatenate([a_pos, small]),
                  size=np.array([bn.size for bn in bins] + [fill[0]] * len(used), dtype=np.int64),
                  u=np.array([bn.u for bn in bins] + [fill[1]] * len(used), dtype=np.int64),
                  caps=list(pk.caps), heavy_mbs=heavy_mbs, slow=pk.slow)
