"""The ``Trace`` value type and the vectorised check that turns a raw column into validated ``int64``.

A trace is a table of document lengths (tokens), optionally with a ``step`` column that says which global
batch (training iteration) each document belongs to. Every reader in :mod:`traces.io` funnels its raw column
through :func:`to_int64_column`, so that all formats accept and reject the same values:

- accepted: integers, and numbers written as floats that are whole (``12``, ``12.0``, ``1e3``);
- rejected: fractions (``12.5``), text that is not a number (``abc``), empty cells, null/NaN, infinities,
  booleans, values outside the int64 range, and values outside the column's range (lengths 1 to
  ``MAX_LENGTH`` = 2^40 tokens, far above any context window, so that sums of lengths stay exact in int64;
  steps ≥ 0).

The checks are numpy/pandas vectorised; only the first offending row is then described in words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dcpsim.traces.errors import TraceError

_INT64_LIMIT = float(2**63)
# Kinds of numpy dtypes that hold arbitrary Python objects or text and need the slow, per-value parse.
_TEXT_KINDS = frozenset("OUST")


def _first(mask: np.ndarray) -> int:
    """Index of the first True in a boolean mask (-1 when none)."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else -1


def _describe(value: Any, minimum: int, maximum: int | None = None) -> str:
    """Say in words why one raw value is not acceptable (called for the first offending row only)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "empty or missing value"
    if isinstance(value, (bool, np.bool_)):
        return "a boolean, not a number"
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return "not a number"
    elif isinstance(value, (int, float, np.integer, np.floating)):
        number = float(value)
    else:
        return f"a {type(value).__name__}, not a number"
    if math.isnan(number):
        return "empty or missing value (NaN)"
    if math.isinf(number):
        return "not a finite number"
    if number != math.floor(number):
        return "not a whole number"
    if abs(number) >= _INT64_LIMIT:
        return "outside the int64 range"
    if maximum is not None and number > maximum:
        return f"above the maximum {maximum}"
    if number == 0 and minimum > 0:
        return "zero"
    return "negative" if number < 0 else f"below the minimum {minimum}"


def to_int64_column(
    values: Any,
    *,
    source: str,
    field: str,
    minimum: int,
    expected: str,
    lines: np.ndarray | None = None,
    maximum: int | None = None,
) -> np.ndarray:
    """Convert a raw column to ``int64``, raising :class:`TraceError` at the first bad row.

    Args:
        values: a 1-D array-like of any dtype (numbers, text, or Python objects as parsed from JSON).
        source: the file (or description) named in error messages.
        field: the column name named in error messages.
        minimum: the smallest valid value (1 for lengths in tokens, 0 for steps).
        expected: what a valid value looks like, in words, for the message.
        lines: optional file line of each row (JSONL), added to the message.
        maximum: the largest valid value (``MAX_LENGTH`` for lengths), or None for the int64 range.

    Returns:
        A new ``int64`` array of the same length.
    """
    raw = np.asarray(values)
    if raw.ndim != 1:
        raise TraceError(
            f"{source}: field {field!r} must be a 1-D column, got shape {raw.shape}",
            source=source,
            field=field,
        )
    n = raw.shape[0]
    kind = raw.dtype.kind
    bad = np.zeros(n, dtype=bool)
    if kind == "b":
        bad[:] = True
        numbers = np.zeros(n, dtype=np.int64)
    elif kind in "iu":
        numbers = raw
        if kind == "u":
            bad |= raw > np.iinfo(np.int64).max
    elif kind == "f":
        numbers = raw
    elif kind in _TEXT_KINDS or raw.dtype.name.startswith("str"):
        obj = raw.astype(object)
        # Booleans and containers would otherwise parse as 1/0 or fail inside pandas: mark them bad first.
        odd = np.fromiter(
            (isinstance(v, (bool, np.bool_)) or not isinstance(v, (str, int, float, np.number)) for v in obj),
            dtype=bool,
            count=n,
        )
        if odd.any():
            obj = obj.copy()
            obj[odd] = None
            bad |= odd
        import pandas as pd  # deferred: only text and mixed columns need it (keeps `import traces` light)

        numbers = pd.to_numeric(pd.Series(obj, dtype=object), errors="coerce").to_numpy()
        if numbers.dtype.kind not in "iuf":
            numbers = numbers.astype(np.float64)
    else:
        raise TraceError(
            f"{source}: field {field!r} has dtype {raw.dtype}, which is not numeric; expected {expected}",
            source=source,
            field=field,
        )
    if numbers.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad |= ~np.isfinite(numbers)
            bad |= numbers != np.floor(numbers)
            bad |= np.abs(numbers) >= _INT64_LIMIT
        numbers = np.where(bad, minimum, numbers)
    elif numbers.dtype.kind == "u":
        numbers = np.where(bad, minimum, np.minimum(numbers, np.iinfo(np.int64).max))
    ints = numbers.astype(np.int64)
    bad |= ints < minimum
    if maximum is not None:
        bad |= ints > maximum
    i = _first(bad)
    if i >= 0:
        value = raw[i].item() if isinstance(raw[i], np.generic) else raw[i]
        line = None if lines is None else int(lines[i])
        problem = _describe(value, minimum, maximum)
        raise TraceError.at_row(source, i + 1, field, value, problem, expected, line=line)
    return ints


MAX_LENGTH = 2**40
LENGTH_EXPECTED = f"a positive whole number of tokens (1 to 2^40 = {MAX_LENGTH})"
STEP_EXPECTED = "a non-negative whole step index (>= 0)"


def _frozen_copy(array: np.ndarray) -> np.ndarray:
    out = np.array(array, dtype=np.int64, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Trace:
    """A validated table of document lengths.

    Attributes:
        lengths: document lengths in tokens, ``int64``, all ≥ 1 (a read-only copy of what was given).
        step: optional global-batch index per document, ``int64``, all ≥ 0, same shape as ``lengths``;
            ``None`` when the trace does not say how documents were batched.
        source: where the trace came from (a file path, or a description such as ``"<memory>"``).

    Construction validates like the readers do, so a ``Trace`` in hand is always usable.
    """

    lengths: np.ndarray
    step: np.ndarray | None = None
    source: str = "<memory>"

    def __post_init__(self) -> None:
        lengths = to_int64_column(
            self.lengths, source=self.source, field="length", minimum=1, expected=LENGTH_EXPECTED,
            maximum=MAX_LENGTH,
        )
        if lengths.size == 0:
            raise TraceError(
                f"{self.source}: the trace has no rows; expected at least one document length",
                source=self.source,
            )
        object.__setattr__(self, "lengths", _frozen_copy(lengths))
        if self.step is not None:
            step = to_int64_column(
                self.step, source=self.source, field="step", minimum=0, expected=STEP_EXPECTED
            )
            if step.shape != lengths.shape:
                raise TraceError(
                    f"{self.source}: field 'step' has {step.size} rows but 'length' has {lengths.size}; "
                    "expected one step per document",
                    source=self.source,
                    field="step",
                )
            object.__setattr__(self, "step", _frozen_copy(step))

    @property
    def num_docs(self) -> int:
        """Number of documents (rows)."""
        return int(self.lengths.size)

    @property
    def num_tokens(self) -> int:
        """Total tokens over all documents."""
        return int(self.lengths.sum())

    def __len__(self) -> int:
        return self.num_docs

    def __eq__(self, other: object) -> bool:
        """Equal when lengths and steps are equal (the source is a label and is not compared)."""
        if not isinstance(other, Trace):
            return NotImplemented
        same_step = (self.step is None and other.step is None) or (
            self.step is not None and other.step is not None and np.array_equal(self.step, other.step)
        )
        return same_step and np.array_equal(self.lengths, other.lengths)

    __hash__ = None  # type: ignore[assignment]
