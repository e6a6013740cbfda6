"""Errors raised by the ``traces`` package.

One exception type for the whole family: a trace file, a generator parameter, a preset name or a batching
parameter that cannot be used. Every message names where the problem is (file, row, field or parameter), the
offending value, and what would be valid.

Row convention: rows are **1-based data rows**, counted the same way for every format: the first record is
row 1. In a CSV file that is the first line *after* the header (so row r is file line r + 1 when no quoted
field spans several lines); in a JSONL file it is the first non-blank line (the message also gives the file
line); in a JSON file it is the first element of the top-level list; in a Parquet file it is the first row of
the table.
"""

from __future__ import annotations

from typing import Any


class TraceError(ValueError):
    """A trace, generator parameter, preset or batching input that cannot be used.

    The structured attributes (``source``, ``row``, ``field``, ``value``) are ``None`` where they do not
    apply; the message always carries the same information in words.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        row: int | None = None,
        field: str | None = None,
        value: Any = None,
    ) -> None:
        super().__init__(message)
        self.source = source
        self.row = row
        self.field = field
        self.value = value

    @classmethod
    def at_row(
        cls,
        source: str,
        row: int,
        field: str,
        value: Any,
        problem: str,
        expected: str,
        line: int | None = None,
    ) -> TraceError:
        """Build the standard message for a bad cell: ``<source>: row <row>, field '<field>': ...``.

        ``row`` is the 1-based data row (see the module docstring); ``line`` optionally adds the file line.
        """
        where = f"row {row}" if line is None else f"row {row} (line {line})"
        msg = f"{source}: {where}, field {field!r}: {problem} (value {value!r}); expected {expected}"
        return cls(msg, source=source, row=row, field=field, value=value)

    @classmethod
    def bad_param(cls, param: str, value: Any, expected: str, context: str = "") -> TraceError:
        """Build the standard message for a bad function parameter (``context`` names the function)."""
        where = f"{context}: " if context else ""
        msg = f"{where}parameter {param!r} = {value!r} is invalid; expected {expected}"
        return cls(msg, field=param, value=value)
