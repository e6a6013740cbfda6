"""Synthetic training data for the runner: token ids per sequence id, and one rank's packed shard.

Token ids are a pure function of ``(seed, sequence id, length)`` (numpy's PCG64 seeded with
``[seed, seq_id]``), so every process, and a single-process reference, builds the same documents without
sending data around.

Targets are next-token prediction *inside* each document: position ``p`` predicts token ``p + 1`` of the same
document, the last token of a document predicts nothing. Pads (which the dual-chunk layout appends to each
document) predict nothing either. Ignored positions carry :data:`IGNORE` as their label. A global batch of
documents of lengths ``L_i`` therefore has ``Σ (L_i − 1)`` targets: :func:`num_targets`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dcpsim.real_runtime.attention.layout import DualChunkLayout, cu_seqlens_from_lengths

IGNORE = -100


def document_tokens(seq_id: int, length: int, vocab: int, seed: int = 0) -> np.ndarray:
    """The ``length`` token ids (int64, in ``0..vocab-1``) of sequence ``seq_id``."""
    rng = np.random.default_rng([int(seed), int(seq_id)])
    return rng.integers(0, vocab, size=int(length), dtype=np.int64)


def num_targets(lengths: Sequence[int] | np.ndarray) -> int:
    """Tokens that have a target (every token but the last of each document)."""
    return int(np.sum(np.asarray(lengths, dtype=np.int64) - 1))


def packed_tokens_and_labels(seq_ids: Sequence[int], lengths: Sequence[int], vocab: int,
                             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and labels of the documents laid end to end (no pads)."""
    toks, labels = [], []
    for s, n in zip(seq_ids, lengths):
        t = document_tokens(int(s), int(n), vocab, seed)
        lab = np.full(int(n), IGNORE, dtype=np.int64)
        lab[:-1] = t[1:]
        toks.append(t)
        labels.append(lab)
    return np.concatenate(toks), np.concatenate(labels)


@dataclass(frozen=True, eq=False)
class ShardInputs:
    """What one rank feeds the model for one CP group: its local ``tokens``, RoPE ``positions`` (restarting
    at 0 in each document), ``labels`` (:data:`IGNORE` where no target), and how its attention is laid out:
    ``layout`` (dual-chunk, for groups of more than one rank) or ``cu_seqlens`` (a group of one: plain packed
    documents, no pads)."""

    tokens: torch.Tensor  # int64 [n]
    positions: torch.Tensor  # int64 [n]
    labels: torch.Tensor  # int64 [n]
    layout: DualChunkLayout | None
    cu_seqlens: tuple[int, ...]
    real_tokens: float  # Σ L / degree: the timeline's ``tokens`` of this rank

    @property
    def targets(self) -> int:
        return int((self.labels != IGNORE).sum())

    def to(self, device: torch.device | str) -> ShardInputs:
        return ShardInputs(self.tokens.to(device), self.positions.to(device), self.labels.to(device), self.layout,
                           self.cu_seqlens, self.real_tokens)


def shard_inputs(seq_ids: Sequence[int], lengths: Sequence[int], degree: int, rank: int, vocab: int,
                 seed: int = 0) -> ShardInputs:
    """The inputs of group member ``rank`` (``0..degree-1``) of a CP group of ``degree`` ranks that processes
    the documents ``seq_ids`` (with ``lengths``) packed in that order."""
    lengths = [int(n) for n in lengths]
    tokens, labels = packed_tokens_and_labels(seq_ids, lengths, vocab, seed)
    real = sum(lengths) / degree
    if degree == 1:
        pos = np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])
        return ShardInputs(torch.from_numpy(tokens), torch.from_numpy(pos), torch.from_numpy(labels), None,
                           cu_seqlens_from_lengths(lengths), real)
    layout = DualChunkLayout.build(lengths, degree)
    gidx = layout.global_index(rank)
    valid = gidx >= 0
    safe = np.where(valid, gidx, 0)
    local_tokens = np.where(valid, tokens[safe], 0)
    local_labels = np.where(valid, labels[safe], IGNORE)
    return ShardInputs(torch.from_numpy(local_tokens), torch.from_numpy(layout.positions(rank)),
                       torch.from_numpy(local_labels), layout, layout.local_cu_seqlens, real)
