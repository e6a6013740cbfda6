"""Where every token of a packed batch lives on a CP group: the dual-chunk layout.

A packed batch is a list of documents laid end to end, ``T = sum(lengths)`` tokens in all, described like
flash-attn's varlen API by cumulative lengths ``cu_seqlens = [0, L0, L0+L1, ...]``. Attention is causal *inside*
each document and zero across documents (the document mask).

Why dual chunks
---------------
Split a causal document of length ``L`` into ``c`` contiguous pieces, one per rank, and the last rank does
about ``2c - 1`` times the attention work of the first: its queries see the whole prefix, the first rank's see
almost nothing. Dual-chunk balancing (TransformerEngine's layout for packed THD batches) instead cuts the
document into ``2c`` equal chunks and gives rank ``i`` chunks ``i`` and ``2c - 1 - i``: an early chunk with
little work paired with a late chunk with much. Every rank then holds the same number of query/key pairs
(up to the diagonal), and in every ring step after the first, either all of a rank's queries see half of the
incoming keys or half of its queries see all of them: the same work on every rank, every step.

Padding (our choice for lengths not divisible by ``2c``)
--------------------------------------------------------
Each document is padded at its end to a multiple of ``2c`` (``padded``), so every chunk of a document has the
same size ``padded / 2c`` and every rank holds exactly the same number of tokens. That keeps ring messages and
all-to-all splits uniform. Pads sit *after* all real tokens of their document, so under the causal mask no
real query ever attends to a pad key: the engines need no extra key mask, pad queries produce harmless
outputs, and their gradients are zero as long as the caller gives zero output-gradients to pads (the sharding
helpers below fill pads with zeros and :meth:`DualChunkLayout.unshard` drops them). A runner must likewise
exclude pad positions from its loss. The cost is at most ``2c - 1`` extra tokens per document.

Local order on a rank: for every document in order, its front chunk then its back chunk. Within a rank,
local index order is therefore also position order inside each document, which is what lets a plain
causal varlen kernel handle the first ring step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch


def cu_seqlens_from_lengths(lengths: Sequence[int]) -> tuple[int, ...]:
    """Cumulative lengths ``(0, L0, L0+L1, ..., T)`` as Python ints (flash-attn's ``cu_seqlens``)."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return tuple(out)


@dataclass(frozen=True, eq=True)
class DualChunkLayout:
    """Dual-chunk placement of packed documents over a CP group of ``degree`` ranks.

    ``lengths`` are the real document lengths; ``padded`` the padded ones (each a positive multiple of
    ``2 * degree`` and at least its real length). Build one with :meth:`build`. Ranks here are *group* ranks
    ``0..degree-1`` (the order of the group's ranks in the plan).
    """

    lengths: tuple[int, ...]
    padded: tuple[int, ...]
    degree: int

    def __post_init__(self) -> None:
        if self.degree < 1:
            raise ValueError(f"DualChunkLayout: degree must be ≥ 1, got {self.degree}")
        if len(self.lengths) != len(self.padded) or not self.lengths:
            raise ValueError(f"DualChunkLayout: need ≥ 1 document and one padded length per document, got "
                             f"lengths={self.lengths}, padded={self.padded}")
        for d, (n, p) in enumerate(zip(self.lengths, self.padded)):
            if n < 1:
                raise ValueError(f"DualChunkLayout: document {d} has length {n}; lengths must be ≥ 1")
            if p < n or p % (2 * self.degree):
                raise ValueError(f"DualChunkLayout: document {d} padded length {p} must be ≥ its length {n} "
                                 f"and a multiple of 2·degree = {2 * self.degree}")

    @staticmethod
    def build(lengths: Sequence[int], degree: int, pad_multiple: int | None = None) -> DualChunkLayout:
        """Layout for ``lengths`` on ``degree`` ranks, padding each document up to a multiple of
        ``pad_multiple`` (default ``2 * degree``; it must itself be a multiple of ``2 * degree``)."""
        m = 2 * degree if pad_multiple is None else int(pad_multiple)
        if degree < 1 or m % (2 * degree):
            raise ValueError(f"DualChunkLayout.build: pad_multiple {m} must be a multiple of 2·degree "
                             f"(degree = {degree})")
        lens = tuple(int(n) for n in lengths)
        return DualChunkLayout(lens, tuple(-(-n // m) * m for n in lens), int(degree))

    def with_degree(self, degree: int) -> DualChunkLayout:
        """The same documents and padding viewed on ``degree`` ranks (``2 * degree`` must divide every padded
        length). The hierarchical engine uses it: after the inner all-to-all, ``u`` ranks' shards of the
        degree ``u·r`` layout form one shard of the degree ``r`` layout."""
        return DualChunkLayout(self.lengths, self.padded, int(degree))

    # ---- sizes -----------------------------------------------------------------------------------------
    @property
    def num_docs(self) -> int:
        return len(self.lengths)

    @property
    def total_tokens(self) -> int:
        """Real tokens in the packed batch (no padding)."""
        return sum(self.lengths)

    @cached_property
    def chunk_sizes(self) -> tuple[int, ...]:
        """Tokens per chunk of every document: ``padded / (2 * degree)``."""
        return tuple(p // (2 * self.degree) for p in self.padded)

    @property
    def local_tokens(self) -> int:
        """Tokens (pads included) every rank holds: ``sum(padded) / degree``."""
        return 2 * sum(self.chunk_sizes)

    @cached_property
    def cu_seqlens(self) -> tuple[int, ...]:
        """Cumulative real lengths of the global packed batch."""
        return cu_seqlens_from_lengths(self.lengths)

    @cached_property
    def local_cu_seqlens(self) -> tuple[int, ...]:
        """Cumulative lengths of the documents' pieces on one rank (front + back chunk each)."""
        return cu_seqlens_from_lengths([2 * s for s in self.chunk_sizes])

    @cached_property
    def half_cu_seqlens(self) -> tuple[int, ...]:
        """Cumulative lengths when keeping only one chunk (front or back) of every document per rank."""
        return cu_seqlens_from_lengths(self.chunk_sizes)

    # ---- index maps (numpy, int64) ---------------------------------------------------------------------
    def positions(self, rank: int) -> np.ndarray:
        """Position inside its (padded) document of every local token of ``rank``."""
        self._check_rank(rank)
        c = self.degree
        parts = []
        for s in self.chunk_sizes:
            parts.append(np.arange(rank * s, (rank + 1) * s))
            parts.append(np.arange((2 * c - 1 - rank) * s, (2 * c - rank) * s))
        return np.concatenate(parts).astype(np.int64)

    def global_index(self, rank: int) -> np.ndarray:
        """Index into the global (unpadded) packed batch of every local token of ``rank``; ``-1`` for pads."""
        pos = self.positions(rank)
        starts = np.repeat(np.asarray(self.cu_seqlens[:-1], dtype=np.int64), [2 * s for s in self.chunk_sizes])
        lens = np.repeat(np.asarray(self.lengths, dtype=np.int64), [2 * s for s in self.chunk_sizes])
        return np.where(pos < lens, starts + pos, -1)

    @cached_property
    def front_index(self) -> np.ndarray:
        """Local indices of every document's front chunk (chunk ``rank``), in document order."""
        return self._half_index(0)

    @cached_property
    def back_index(self) -> np.ndarray:
        """Local indices of every document's back chunk (chunk ``2·degree - 1 - rank``)."""
        return self._half_index(1)

    def _half_index(self, which: int) -> np.ndarray:
        starts = self.local_cu_seqlens[:-1]
        return np.concatenate([np.arange(o + which * s, o + (which + 1) * s)
                               for o, s in zip(starts, self.chunk_sizes)]).astype(np.int64)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.degree:
            raise ValueError(f"DualChunkLayout: rank {rank} is outside the group of {self.degree} ranks")

    # ---- moving tensors --------------------------------------------------------------------------------
    def shard(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        """The slice of a global packed tensor ``x`` (first dim = ``total_tokens``) that ``rank`` holds,
        with zeros at pad positions. Differentiable with respect to ``x``."""
        if x.shape[0] != self.total_tokens:
            raise ValueError(f"DualChunkLayout.shard: tensor has {x.shape[0]} tokens, layout expects "
                             f"{self.total_tokens} (lengths {self.lengths})")
        gidx = torch.as_tensor(self.global_index(rank), device=x.device)
        valid = gidx >= 0
        gathered = x.index_select(0, gidx.clamp(min=0))
        shape = (-1,) + (1,) * (x.dim() - 1)
        return gathered * valid.view(shape).to(x.dtype)

    def unshard(self, shards: Sequence[torch.Tensor]) -> torch.Tensor:
        """Reassemble the global packed tensor from every rank's shard (group-rank order), dropping pads."""
        if len(shards) != self.degree:
            raise ValueError(f"DualChunkLayout.unshard: got {len(shards)} shards for {self.degree} ranks")
        first = shards[0]
        out = first.new_empty((self.total_tokens,) + tuple(first.shape[1:]))
        for rank, sh in enumerate(shards):
            if sh.shape[0] != self.local_tokens:
                raise ValueError(f"DualChunkLayout.unshard: shard of rank {rank} has {sh.shape[0]} tokens, "
                                 f"expected {self.local_tokens}")
            gidx = torch.as_tensor(self.global_index(rank), device=sh.device)
            keep = gidx >= 0
            out[gidx[keep]] = sh[keep]
        return out
