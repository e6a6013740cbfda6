"""HyDra's placement bookkeeping: CP groups under construction (bins) and microbatches, in sorted lists.

Every CP group is a *bin* with a load (s; its overhead plus the work of its sequences at its size and engine),
a token count per rank (≤ the memory budget M) and a capacity: (1 + tolerance) · τ, or (1 + tolerance) · h in a
microbatch of a heavy sequence of height h > τ. Bins of one (size, engine) form a *class* kept as a sorted list
of (load − capacity, bin) (most room first); a bin whose load changes leaves the list and re-enters at its new
place (two bisections and a memmove: the lists hold one class's bins), and a search walks the front of a list
without changing it. Microbatches sit in one more sorted list, by free ranks, and are carved left to right in
non-increasing sizes, so power-of-two groups land on aligned blocks. Phase A of :func:`policies.hydra_placement.
place` works on these lists; the fill (:mod:`policies.hydra_fill`) starts from its bins.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

PROBES = 8  # bins set aside per class and sequence when only the token budget fails


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
        # per class (size, u) its bins as sorted (load − capacity, bin): most room first
        self.classes: dict[tuple[int, int], list[tuple[float, int]]] = {}
        self.free: list[tuple[int, float, int]] = []  # sorted (−free ranks, −cap, mb): most free ranks first
        self.short = 0  # microbatches below τ (a height profile's ramps)

    # ---- microbatches and bins ----------------------------------------------------------------------
    def new_mb(self, height: float = 0.0, exact: bool = False) -> int:
        """A new microbatch of capacity (1 + tol) · max(τ, height), or (1 + tol) · height if ``exact``."""
        k = len(self.caps)
        self.caps.append((1.0 + self.tol) * (height if exact else max(self.tau, height)))
        self.cursor.append(0)
        insort(self.free, (-self.W, -self.caps[k], k))
        return k

    def block_cap(self, k: int, first: int, size: int) -> float:
        """Capacity of a group on ranks first .. first + size − 1 of microbatch k: the microbatch's, divided by
        the slowest member's slow-down factor (a group runs at its slowest member's pace: sim.engine)."""
        return self.caps[k] / self.slowest(first, size)

    def slowest(self, first: int, size: int) -> float:
        """The largest slow-down factor of ranks first .. first + size − 1 (1 without stragglers)."""
        return 1.0 if self.slow is None else float(self.slow[first:first + size].max())

    def fits_block(self, k: int, size: int) -> bool:
        c = self.cursor[k]
        return self.W - c >= size and (not self.aligned or c % size == 0)

    def carve(self, k: int, size: int, u: int, pos: int = -1, work: float = 0.0, tokens: float = 0.0) -> Bin:
        """A new group of ``size`` ranks at microbatch k's cursor; with ``pos`` ≥ 0, holding that sequence."""
        c0 = self.cursor[k]
        mcap = self.caps[k]
        cap = mcap if self.slow is None else self.block_cap(k, c0, size)
        ovh = self.overhead[size, u]
        b = (Bin(k, c0, size, u, cap, ovh + work, 0.0 + tokens, [pos]) if pos >= 0
             else Bin(k, c0, size, u, cap, ovh))
        free, W = self.free, self.W
        del free[bisect_left(free, (c0 - W, -mcap, k))]
        insort(free, (size + c0 - W, -mcap, k))
        self.cursor[k] = c0 + size
        bins = self.bins
        bins.append(b)
        entries = self.classes.setdefault((size, u), [])
        insort(entries, (b.load - cap, len(bins) - 1))
        return b

    def structure(self, items: Iterable[tuple[int, int, int, float, float]]) -> None:
        """Phase A of :func:`policies.hydra.placement.place`: each (position, size, u, work, tokens) in turn
        joins the roomiest group of its class within τ (or h: :meth:`best_in_class`, strict), else carves a new
        group from the microbatch with the most free ranks that can carve it and whose height holds its load
        (short microbatches of a height profile are passed over: at most ``PROBES`` + 2 · their number are
        looked at), else joins a group within the tolerance, else opens a microbatch."""
        div = 1.0 + self.tol
        limit = PROBES + 2 * self.short
        for i, c, u, w, t in items:
            hit = self.best_in_class((c, u), w, t, strict=True)
            if hit is not None:
                self.add(hit[1], i, w, t)
                continue
            load = self.overhead[c, u] + w
            at = -1  # the microbatch to carve from
            for n, (nf, ncap, k) in enumerate(self.free):  # (−free ranks, −capacity, microbatch)
                if n >= limit or -nf < c:
                    break
                if self.fits_block(k, c) and (not self.short or load <= -ncap / div * (1 + 1e-12)):
                    at = k
                    break
            if at >= 0:
                self.carve(at, c, u, i, w, t)
                continue
            hit = self.best_in_class((c, u), w, t, strict=False)
            if hit is not None:
                self.add(hit[1], i, w, t)
            else:
                self.carve(self.new_mb(), c, u, i, w, t)

    def add(self, gid: int, pos: int, work: float, tokens: float) -> None:
        b = self.bins[gid]
        entries = self.classes[b.size, b.u]
        del entries[bisect_left(entries, (b.load - b.cap, gid))]
        b.seqs.append(pos)
        b.load += work
        b.tokens += tokens
        insort(entries, (b.load - b.cap, gid))

    def best_in_class(self, cls: tuple[int, int], work: float, tokens: float,
                      strict: bool) -> tuple[float, int] | None:
        """(room after placing, bin id) of the roomiest bin of class ``cls`` = (size, u) that takes ``work`` and
        ``tokens`` within its capacity (capacity / (1 + tol), i.e. τ or h, if ``strict``): the bins in order of
        room, passing over at most ``PROBES`` that lack only the tokens."""
        entries = self.classes.get(cls)
        if not entries:
            return None
        bins = self.bins
        b = bins[entries[0][1]]
        if b.load + work > (b.cap / (1.0 + self.tol) if strict else b.cap):
            return None  # the roomiest bin of the class cannot take it: none can (the common case, first)
        lim = self.M * (1 + 1e-12)
        div = 1.0 + self.tol
        for _key, gid in entries[:PROBES]:
            b = bins[gid]
            cap = b.cap / div if strict else b.cap
            if b.load + work > cap:
                return None
            if b.tokens + tokens <= lim:
                return b.load + work - cap, gid
        return None

    def all_free_blocks(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Microbatch, first rank and capacity of every microbatch's free blocks of ``size`` ranks, microbatch by
        microbatch (:meth:`free_blocks` of each, concatenated)."""
        parts = [(k, *self.free_blocks(k, size)) for k in range(len(self.caps))]
        return (np.repeat(np.arange(len(parts), dtype=np.int64), [len(f) for _, f, _ in parts]),
                np.concatenate([f for _, f, _ in parts] + [np.zeros(0, dtype=np.int64)]),
                np.concatenate([c for _, _, c in parts] + [np.zeros(0)]))

    def free_blocks(self, k: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """First ranks and capacities of microbatch k's free blocks of ``size`` ranks (aligned when carving is)."""
        c0 = self.cursor[k]
        if not self.fits_block(k, size):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        first = np.arange(c0, self.W - size + 1, size, dtype=np.int64)
        if self.slow is None:
            return first, np.full(len(first), self.caps[k])
        return first, self.caps[k] / self.slow[first[:, None] + np.arange(size)].max(axis=1)
