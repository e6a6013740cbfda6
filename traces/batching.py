"""Forming global batches (one per training iteration) from a trace or a preset.

Rules, in order:

1. Documents longer than the context window are cut into context-sized pieces (:func:`split_long`). A piece
   is one *sequence* of a batch; its id is its global index among all pieces (unique across batches, in
   trace order).
2. Without a ``step`` column, consecutive pieces fill a batch until adding the next would exceed the
   token budget ``global_batch_tokens``; a batch always gets at least one piece (so a piece longer than the
   budget is a batch on its own). The last batch holds what is left and may be under-filled.
3. With a ``step`` column, batch s holds the pieces of the documents with step s (in trace order); steps
   with no documents give no batch. A budget, if given, must hold every step's tokens.

Sizes that cannot run are refused up front with the limit named: a batch of more than ``MAX_BATCH_SEQS``
sequences (2^18; every policy plans and the simulator prices each sequence), and a draw or a cut of more than
``splitting.MAX_PIECES`` sequences in all.

Boundaries are found with one ``cumsum`` and one vectorised ``searchsorted`` (the next start for every
possible start); only the walk from batch to batch is a Python loop, one cheap step per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dcpsim.traces._params import require_int
from dcpsim.traces.errors import TraceError
from dcpsim.traces.presets import TracePreset, get_preset
from dcpsim.traces.splitting import MAX_PIECES, split_long, split_pieces
from dcpsim.traces.trace import Trace

__all__ = ["MAX_BATCH_SEQS", "GlobalBatch", "form_batches", "sample_batches", "split_long"]

MAX_BATCH_SEQS = 2**18
"""The most sequences one global batch may hold (262,144; the shipped scenarios hold a few thousand): planning
and simulating a batch cost at least one step per sequence, so a batch of millions of tiny sequences (a
1-token context, ``--global-batch-seqs 1000000``) would run for hours; it is refused with this limit named."""


def _too_many(where: str, count: int, how: str) -> TraceError:
    return TraceError(
        f"{where}: a global batch would hold {count:,} sequences ({how}), over the limit of "
        f"{MAX_BATCH_SEQS:,} (2^18); expected a smaller token budget, a longer context or fewer "
        "sequences per batch",
        value=count,
    )


def _check_batch_sizes(where: str, bounds: list[int], how: str) -> None:
    sizes = np.diff(np.asarray(bounds, dtype=np.int64))
    if sizes.size and int(sizes.max()) > MAX_BATCH_SEQS:
        raise _too_many(where, int(sizes.max()), how)


@dataclass(frozen=True, eq=False)
class GlobalBatch:
    """The sequences of one training iteration.

    Attributes:
        seq_ids: sequence ids (``int64``, unique within the batch; unique across the batches of one call).
        lengths: sequence lengths in tokens (``int64``, each ≥ 1), aligned with ``seq_ids``.
        step: the iteration index.

    Arrays are stored as read-only ``int64`` copies.
    """

    seq_ids: np.ndarray
    lengths: np.ndarray
    step: int

    def __post_init__(self) -> None:
        ids = np.array(self.seq_ids, dtype=np.int64, copy=True)
        lengths = np.array(self.lengths, dtype=np.int64, copy=True)
        where = f"GlobalBatch(step={self.step})"
        if ids.ndim != 1 or ids.shape != lengths.shape or ids.size == 0:
            raise TraceError(
                f"{where}: seq_ids shape {ids.shape} and lengths shape {lengths.shape}; "
                "expected two non-empty 1-D arrays of the same length"
            )
        if lengths.min() < 1:
            i = int(np.argmin(lengths))
            raise TraceError(
                f"{where}: sequence {int(ids[i])} has length {int(lengths[i])}; expected >= 1 token"
            )
        if ids.size > 1 and not np.all(ids[1:] > ids[:-1]):  # ascending ids are unique: skip the sort
            sorted_ids = np.sort(ids)
            dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
            if dup.size:
                raise TraceError(
                    f"{where}: sequence id {int(sorted_ids[dup[0]])} appears twice; ids must be unique"
                )
        ids.setflags(write=False)
        lengths.setflags(write=False)
        object.__setattr__(self, "seq_ids", ids)
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "step", require_int(self.step, "step", 0, "GlobalBatch"))

    @classmethod
    def of(cls, lengths: Any, ids: Any = None, *, step: int = 0) -> GlobalBatch:
        """A batch of ``lengths`` (tokens) whose sequence ids are ``ids`` (default ``0..n-1``), checked like
        the constructor. For callers and tests that build a batch by hand, e.g. with ids that are not the
        positions (``GlobalBatch.of([5, 7], ids=[10, 11])``)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        seq_ids = np.arange(lengths.size, dtype=np.int64) if ids is None else ids
        return cls(seq_ids, lengths, step)

    @property
    def num_seqs(self) -> int:
        """Number of sequences."""
        return int(self.seq_ids.size)

    @property
    def num_tokens(self) -> int:
        """Total tokens over all sequences."""
        return int(self.lengths.sum())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GlobalBatch):
            return NotImplemented
        return (
            self.step == other.step
            and np.array_equal(self.seq_ids, other.seq_ids)
            and np.array_equal(self.lengths, other.lengths)
        )

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _unchecked(cls, seq_ids: np.ndarray, lengths: np.ndarray, step: int) -> GlobalBatch:
        """Build without copying or validating: only for callers that guarantee every invariant above and
        pass read-only ``int64`` arrays (this module's batch formers)."""
        batch = object.__new__(cls)
        object.__setattr__(batch, "seq_ids", seq_ids)
        object.__setattr__(batch, "lengths", lengths)
        object.__setattr__(batch, "step", step)
        return batch


def _greedy_starts(pieces: np.ndarray, budget: int, limit: int | None = None) -> list[int]:
    """Start index of each budget-filled batch of consecutive pieces (at most ``limit`` batches)."""
    n = pieces.size
    cum = np.concatenate(([0], np.cumsum(pieces)))
    # For every possible start i: one past the last piece that keeps the batch within the budget.
    nxt = np.searchsorted(cum, cum[:-1] + budget, side="right") - 1
    nxt = np.maximum(nxt, np.arange(1, n + 1))
    starts: list[int] = []
    i = 0
    while i < n and (limit is None or len(starts) < limit):
        starts.append(i)
        i = nxt.item(i)
    return starts


def _batches(ids: np.ndarray, pieces: np.ndarray, bounds: list[int], steps: list[int]) -> list[GlobalBatch]:
    """Batches ``k`` = ``ids[bounds[k]:bounds[k+1]]`` as read-only views (no per-batch copy or re-check)."""
    ids = np.array(ids, dtype=np.int64)
    pieces = np.array(pieces, dtype=np.int64)
    ids.setflags(write=False)
    pieces.setflags(write=False)
    return [
        GlobalBatch._unchecked(ids[a:b], pieces[a:b], s) for a, b, s in zip(bounds[:-1], bounds[1:], steps)
    ]


def form_batches(
    trace_or_lengths: Trace | Any,
    global_batch_tokens: int | None,
    context_len: int,
    steps: int | None = None,
    global_batch_seqs: int | None = None,
) -> list[GlobalBatch]:
    """Global batches from a trace (see the module docstring for the rules).

    Args:
        trace_or_lengths: a :class:`Trace` (its ``step`` column, if any, decides the batches) or a 1-D
            array-like of document lengths in tokens.
        global_batch_tokens: token budget per batch (≥ 1); may be ``None`` only for a trace with steps.
        context_len: context window in tokens (≥ 1); longer documents are cut.
        steps: return only the first ``steps`` batches (≥ 1); ``None`` returns all of them.
        global_batch_seqs: batches of this many consecutive sequences (pieces) instead of a token budget
            (Megatron's global batch size; the last batch may be short); a ``step`` column still wins.

    Raises:
        TraceError: a bad parameter (named), a step whose tokens exceed the budget, or fewer batches than
            ``steps``.
    """
    ctx = "form_batches"
    trace = trace_or_lengths if isinstance(trace_or_lengths, Trace) else Trace(trace_or_lengths, source=ctx)
    seqs = None if global_batch_seqs is None else require_int(global_batch_seqs, "global_batch_seqs", 1, ctx)
    if global_batch_tokens is None and trace.step is None and seqs is None:
        raise TraceError.bad_param(
            "global_batch_tokens", None, "an integer >= 1 (a trace without steps)", ctx
        )
    budget = (
        None
        if global_batch_tokens is None
        else require_int(global_batch_tokens, "global_batch_tokens", 1, ctx)
    )
    context = require_int(context_len, "context_len", 1, ctx)
    limit = None if steps is None else require_int(steps, "steps", 1, ctx)
    pieces, doc = split_pieces(trace.lengths, context)
    ids = np.arange(pieces.size, dtype=np.int64)
    if trace.step is None:
        # One start past the limit says where the last returned batch ends.
        if seqs is not None:
            starts = _count_starts(pieces.size, seqs, None if limit is None else limit + 1)
        else:
            starts = _greedy_starts(pieces, budget, None if limit is None else limit + 1)  # type: ignore[arg-type]
        bounds = starts + [pieces.size] if limit is None or len(starts) <= limit else starts
        _check_batch_sizes(trace.source, bounds, "consecutive pieces of the trace")
        batches = _batches(ids, pieces, bounds, list(range(len(bounds) - 1)))
    else:
        piece_step = trace.step[doc]
        order = np.argsort(piece_step, kind="stable")
        values, first = np.unique(piece_step[order], return_index=True)
        step_bounds = np.append(first, order.size)
        if limit is not None:
            values, step_bounds = values[:limit], step_bounds[: limit + 1]
            order = order[: step_bounds[-1]]
        if budget is not None:
            tokens = np.add.reduceat(pieces[order], step_bounds[:-1])
            over = np.flatnonzero(tokens > budget)
            if over.size:
                k = int(over[0])
                raise TraceError(
                    f"{trace.source}: step {int(values[k])} holds {int(tokens[k])} tokens, over "
                    f"global_batch_tokens = {budget}; expected a budget that holds every step (or None)",
                    source=trace.source,
                    field="step",
                    value=int(values[k]),
                )
        _check_batch_sizes(trace.source, step_bounds.tolist(), "the pieces of one step")
        batches = _batches(order, pieces[order], step_bounds.tolist(), values.tolist())
    if limit is not None and len(batches) < limit:
        raise TraceError(
            f"{trace.source}: the trace fills only {len(batches)} global batches; "
            f"steps = {limit} were asked for"
        )
    return batches


def sample_batches(
    preset: TracePreset | str,
    iterations: int,
    global_batch_tokens: int,
    context_len: int | None = None,
    seed: int = 0,
    global_batch_seqs: int | None = None,
) -> list[GlobalBatch]:
    """``iterations`` budget-filled global batches of documents drawn from a preset.

    With ``global_batch_seqs`` every batch holds exactly that many sequences (pieces) instead, whatever
    their tokens; documents are drawn in chunks in the same way until ``iterations`` batches are full.

    Documents are drawn in chunks (chunk k seeded by the k-th child of ``np.random.SeedSequence(seed)``),
    cut at ``context_len`` (default: the preset's) and batched as :func:`form_batches` does, until every one
    of the ``iterations`` batches is *closed* by the budget rule (the next piece would not fit): no batch is
    left short because the draw ran out. Sequence ids are 0, 1, ... in draw order. Deterministic in all
    arguments.

    Raises:
        TraceError: an unknown preset name or a bad parameter (named).
    """
    ctx = "sample_batches"
    spec = preset if isinstance(preset, TracePreset) else get_preset(preset)
    iters = require_int(iterations, "iterations", 1, ctx)
    budget = require_int(global_batch_tokens, "global_batch_tokens", 1, ctx)
    context = spec.context_len if context_len is None else require_int(context_len, "context_len", 1, ctx)
    want = iters + 1  # one more batch than needed proves the last needed one was closed by the budget
    root = np.random.SeedSequence(require_int(seed, "seed", 0, ctx))
    if global_batch_seqs is not None:
        return _sample_by_count(spec, iters, require_int(global_batch_seqs, "global_batch_seqs", 1, ctx),
                                context, root)
    chunks: list[np.ndarray] = []
    size = 4096
    while True:
        chunk_seed = int(root.spawn(1)[0].generate_state(1, np.uint64)[0])
        chunks.append(split_long(spec.sample(size, chunk_seed), context))
        pieces = np.concatenate(chunks)
        if len(chunks) == 1:  # the first chunk's mean piece says how many sequences the batches will need
            _check_draw(spec.name, budget, want, float(pieces.mean()))
        if len(_greedy_starts(pieces, budget, want)) == want:
            break
        # Every piece has >= 1 token, so each round adds >= 1024 tokens and the loop ends.
        missing = want * budget - int(pieces.sum())
        size = max(1024, int(1.1 * missing * pieces.size / pieces.sum()) + 1)
    starts = _greedy_starts(pieces, budget, want)
    ids = np.arange(pieces.size, dtype=np.int64)
    return _batches(ids[: starts[-1]], pieces[: starts[-1]], starts, list(range(iters)))


def _check_draw(name: str, budget: int, want: int, mean_piece: float) -> None:
    """Refuse, before drawing them, batches that would hold more than ``MAX_BATCH_SEQS`` sequences or need
    more than ``MAX_PIECES`` in all (estimated from the first chunk's mean piece length, in tokens)."""
    per_batch = budget / mean_piece
    how = f"global_batch_tokens = {budget:,} over pieces of {mean_piece:,.1f} tokens on average"
    if per_batch > MAX_BATCH_SEQS:
        raise _too_many(f"preset {name!r}", int(per_batch), how)
    if per_batch * want > MAX_PIECES:
        raise TraceError(
            f"preset {name!r}: {want - 1:,} batches of about {int(per_batch):,} sequences ({how}) need about "
            f"{int(per_batch * want):,} sequences, over the limit of {MAX_PIECES:,} (2^24) per draw; "
            "expected fewer iterations or a smaller token budget",
            value=int(per_batch * want),
        )


def _count_starts(n: int, seqs: int, limit: int | None = None) -> list[int]:
    """Start index of each batch of ``seqs`` consecutive pieces out of ``n`` (at most ``limit`` batches)."""
    starts = list(range(0, n, seqs))
    return starts if limit is None else starts[:limit]


def _sample_by_count(spec: TracePreset, iters: int, seqs: int, context: int,
                     root: np.random.SeedSequence) -> list[GlobalBatch]:
    """``iters`` batches of exactly ``seqs`` pieces drawn from ``spec`` (see :func:`sample_batches`)."""
    if seqs > MAX_BATCH_SEQS:
        raise _too_many(f"preset {spec.name!r}", seqs, "global_batch_seqs")
    need = iters * seqs
    if need > MAX_PIECES:
        raise TraceError(
            f"preset {spec.name!r}: {iters:,} batches of {seqs:,} sequences need {need:,} sequences, over "
            f"the limit of {MAX_PIECES:,} (2^24) per draw; expected fewer iterations or sequences per batch",
            value=need,
        )
    chunks: list[np.ndarray] = []
    have = 0
    while have < need:
        chunk_seed = int(root.spawn(1)[0].generate_state(1, np.uint64)[0])
        chunks.append(split_long(spec.sample(max(1024, need - have), chunk_seed), context))
        have += chunks[-1].size
    pieces = np.concatenate(chunks)[:need]
    ids = np.arange(need, dtype=np.int64)
    return _batches(ids, pieces, list(range(0, need + 1, seqs)), list(range(iters)))
