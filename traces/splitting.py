"""Cutting documents longer than the context window into context-sized pieces.

A document of L tokens with a context window of C tokens becomes ⌈L/C⌉ pieces: ⌊L/C⌋ pieces of C tokens and
the remainder (if any) last, as data pipelines do when they chunk long documents into training sequences.
Everything here is vectorised: the cost is O(number of pieces) numpy work, with no per-document Python loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dcpsim.traces._params import require_int
from dcpsim.traces.errors import TraceError
from dcpsim.traces.trace import LENGTH_EXPECTED, MAX_LENGTH, to_int64_column

MAX_PIECES = 2**24
"""The most sequences (pieces) one call may produce (16,777,216: 256 MiB of int64 lengths and as much of
document indices). A larger request, such as a 1-token context, is refused before any array is built."""


def split_pieces(lengths: Any, context_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Split documents at ``context_len`` tokens and say which document each piece came from.

    Args:
        lengths: 1-D array-like of document lengths in tokens (each ≥ 1).
        context_len: the context window in tokens (≥ 1).

    Returns:
        ``(pieces, doc)``: ``pieces`` are the piece lengths in tokens (``int64``, each in 1..context_len, in
        document order, a document's pieces consecutive with the remainder last); ``doc[k]`` is the index of
        the document that piece k came from.

    Raises:
        TraceError: ``context_len`` < 1, a length that is not a whole number in 1..2^40 (naming its row), or
            more than ``MAX_PIECES`` pieces.
    """
    context = require_int(context_len, "context_len", 1, "split_long")
    docs = to_int64_column(lengths, source="split_long", field="length", minimum=1, expected=LENGTH_EXPECTED,
                           maximum=MAX_LENGTH)
    counts = (docs + (context - 1)) // context
    total = int(counts.sum())
    if total > MAX_PIECES:
        raise TraceError(
            f"cutting {docs.size:,} documents ({int(docs.sum()):,} tokens) at context_len = {context:,} "
            f"gives {total:,} sequences, over the limit of {MAX_PIECES:,} (2^24); expected a longer "
            "context or fewer or shorter documents",
            field="context_len",
            value=context,
        )
    doc = np.repeat(np.arange(docs.size, dtype=np.int64), counts)
    pieces = np.full(doc.size, context, dtype=np.int64)
    last = np.cumsum(counts) - 1
    pieces[last] = docs - (counts - 1) * context
    return pieces, doc


def split_long(lengths: Any, context_len: int) -> np.ndarray:
    """Piece lengths (tokens, ``int64``) after cutting every document longer than ``context_len``.

    Token count is conserved (``split_long(x, c).sum() == sum(x)``), every piece is ≤ ``context_len``, order
    is preserved and documents that fit are unchanged. See :func:`split_pieces` for the rules and errors.
    """
    return split_pieces(lengths, context_len)[0]
