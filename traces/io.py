"""Reading and writing length traces, with the format chosen by the file extension.

Formats (one document per row; lengths in tokens):

- ``.csv``: a header row with a ``length`` column and an optional ``step`` column; other columns are
  ignored. Blank lines at the end of the file are ignored; a blank line in the middle is an empty cell.
- ``.parquet``: a table with a ``length`` column and an optional ``step`` column (other columns ignored).
- ``.jsonl``: one JSON object per line, ``{"length": 4096}`` or ``{"length": 4096, "step": 0}``; blank
  lines are skipped. Either every row has ``step`` or none does.
- ``.json``: either a plain list of lengths, ``[4096, 812, ...]`` (the shape of public document-length
  dumps), or a list of objects as in JSONL.

Errors are :class:`~traces.errors.TraceError`; rows in messages are 1-based data rows (see
:mod:`traces.errors`). Values are checked by :func:`traces.trace.to_int64_column`: whole numbers only
(``12`` and ``12.0`` are accepted, ``12.5``, ``abc``, empty cells and null are not), lengths 1 to 2^40,
steps ≥ 0. Files are read through :mod:`dcpsim.userfile`: a regular file (a FIFO or a directory is refused
before anything is opened), at most 1 GiB, UTF-8 (the first bad byte's line and column named), JSON nested at
most 64 levels, no NaN or Infinity literals; a CSV row with more fields than the header is refused (pandas
would otherwise make the first column an index and read the wrong column).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from dcpsim import userfile
from dcpsim.traces import readers
from dcpsim.traces.errors import TraceError
from dcpsim.traces.trace import LENGTH_EXPECTED, MAX_LENGTH, STEP_EXPECTED, Trace, to_int64_column

__all__ = ["SUPPORTED_EXTENSIONS", "read_trace", "write_trace"]

SUPPORTED_EXTENSIONS: tuple[str, ...] = (".csv", ".parquet", ".jsonl", ".json")

_READERS: dict[str, Callable[[Path, str], readers.Raw]] = {
    ".csv": readers.read_csv,
    ".parquet": readers.read_parquet,
    ".jsonl": readers.read_jsonl,
    ".json": readers.read_json,
}


def _extension(path: Path) -> str:
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise TraceError(
            f"{path}: unknown trace format {ext or '(no extension)'!r}; "
            f"expected one of {', '.join(SUPPORTED_EXTENSIONS)}",
            source=str(path),
            value=ext,
        )
    return ext


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a length trace from ``path`` (format by extension, see the module docstring).

    Returns:
        A :class:`Trace` with ``int64`` lengths (tokens), the ``step`` column if the file has one, and
        ``source`` set to the path.

    Raises:
        TraceError: unknown extension, missing, empty or not a regular file, not UTF-8, nested too deeply,
            a CSV row wider than the header, no rows, no ``length`` column, or a value that is not a whole
            number in range (lengths 1 to 2^40, steps ≥ 0), naming the file, row, field and value.
    """
    p = Path(path)
    source = str(p)
    reader = _READERS[_extension(p)]
    userfile.check_regular(p, readers.WHAT, error=TraceError)  # before any open: a FIFO must not block
    if p.stat().st_size == 0:
        raise TraceError(f"{source}: file is empty; expected at least one document length", source=source)
    raw_length, raw_step, lines = reader(p, source)
    if len(raw_length) == 0:
        raise readers.no_rows(source)
    lengths = to_int64_column(
        raw_length, source=source, field="length", minimum=1, expected=LENGTH_EXPECTED, lines=lines,
        maximum=MAX_LENGTH,
    )
    step = None
    if raw_step is not None:
        step = to_int64_column(
            raw_step, source=source, field="step", minimum=0, expected=STEP_EXPECTED, lines=lines
        )
    return Trace(lengths=lengths, step=step, source=source)


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` to ``path`` in the format named by its extension (the parent directory must exist).

    Columns are ``length`` and, when the trace has steps, ``step``. A ``.json`` file without steps is a plain
    list of lengths; with steps it is a list of objects.
    """
    if not isinstance(trace, Trace):
        raise TraceError(
            f"write_trace: expected a Trace, got {type(trace).__name__}; wrap lengths in Trace(...)"
        )
    p = Path(path)
    ext = _extension(p)
    if ext in (".csv", ".parquet"):
        import pyarrow as pa

        columns = {"length": trace.lengths} | ({} if trace.step is None else {"step": trace.step})
        if ext == ".csv":
            import pyarrow.csv as pacsv

            with p.open("wb") as handle:
                handle.write((",".join(columns) + "\n").encode())
                pacsv.write_csv(pa.table(columns), handle, pacsv.WriteOptions(include_header=False))
        else:
            import pyarrow.parquet as pq

            pq.write_table(pa.table(columns), p)
        return
    lengths = trace.lengths.tolist()
    if trace.step is None:
        records = [f'{{"length": {n}}}' for n in lengths]
    else:
        records = [f'{{"length": {n}, "step": {s}}}' for n, s in zip(lengths, trace.step.tolist())]
    with p.open("w", encoding="utf-8") as handle:
        if ext == ".jsonl":
            handle.write("\n".join(records) + "\n")
        elif trace.step is None:
            json.dump(lengths, handle)
        else:
            handle.write("[" + ",\n".join(records) + "]\n")
