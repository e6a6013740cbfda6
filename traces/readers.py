"""Per-format parsing of trace files into raw columns (validation happens in :mod:`traces.trace`).

Each reader returns ``(length, step, lines)``: the raw ``length`` column, the raw ``step`` column or
``None``, and, for JSONL, the file line of every row (for messages). Raw columns are numpy arrays of whatever
the file held (integers, floats, text or parsed JSON values); :func:`traces.trace.to_int64_column` then
checks them all the same way. pandas and pyarrow are imported on first use.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim import userfile
from dcpsim.traces.errors import TraceError

Raw = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]
_OBJECT_EXAMPLE = 'an object such as {"length": 4096, "step": 0}'
WHAT = "trace file"


def read_text(path: Path, source: str) -> tuple[bytes, str]:
    """The file's bytes and its UTF-8 text (regular file, size cap, decode: :mod:`dcpsim.userfile`)."""
    data = userfile.read_bytes(path, WHAT, error=TraceError)
    return data, userfile.decode_utf8(data, source, WHAT, error=TraceError)


def _check_widths(data: bytes, text: str, source: str) -> None:
    """Refuse a data row with more fields than the header: pandas would silently make the first column an
    index and read the wrong column as ``length``. Fields are counted per line with numpy when the file has
    no quotes, else with the csv module (a quoted field may hold commas and newlines)."""
    if b'"' in data:
        rows = csv.reader(io.StringIO(text))
        header = len(next(rows, []))
        widths = [len(r) for r in rows]
        lines = False
    else:
        raw = np.frombuffer(data, dtype=np.uint8)
        line_of_comma = np.searchsorted(np.flatnonzero(raw == 10), np.flatnonzero(raw == 44))
        per_line = np.bincount(line_of_comma, minlength=int(np.count_nonzero(raw == 10)) + 1) + 1
        header, widths, lines = int(per_line[0]), per_line[1:].tolist(), True
    wider = np.flatnonzero(np.asarray(widths, dtype=np.int64) > header)
    if wider.size:
        over = int(wider[0])
        where = f"row {over + 1} (line {over + 2})" if lines else f"row {over + 1}"
        raise TraceError(
            f"{source}: {where} has {widths[over]} fields but the header has {header}; expected at most "
            "one field per header column (a field without a header name would shift the columns)",
            source=source,
            row=over + 1,
        )


def no_length_column(source: str, columns: list[str]) -> TraceError:
    found = ", ".join(repr(c) for c in columns) or "none"
    return TraceError(
        f"{source}: no 'length' column (columns found: {found}); "
        "expected a 'length' column of document lengths in tokens, and optionally a 'step' column",
        source=source,
        field="length",
    )


def no_rows(source: str) -> TraceError:
    return TraceError(
        f"{source}: the trace has no rows; expected at least one document length", source=source
    )


def read_csv(path: Path, source: str) -> Raw:
    """CSV with a header. Fast path: pandas' C parser infers int64 columns; anything else (floats, text,
    empty cells, blank lines) is re-read as text so that messages quote the cell exactly as written."""
    import pandas as pd

    data, text = read_text(path, source)
    _check_widths(data, text, source)
    header = [c.strip() for c in next(csv.reader(io.StringIO(text)), [])]
    for name in ("length", "step"):
        if header.count(name) > 1:  # pandas would rename the second one 'length.1' and read the first
            raise TraceError(f"{source}: the header names {name!r} twice; expected one {name!r} column",
                             source=source, field=name)

    def load(**options: Any) -> pd.DataFrame:
        try:
            frame = pd.read_csv(io.StringIO(text), skip_blank_lines=False, **options)
        except pd.errors.EmptyDataError:
            raise TraceError(
                f"{source}: file is empty; expected a CSV header with a 'length' column", source=source
            ) from None
        except (pd.errors.ParserError, ValueError) as exc:
            raise TraceError(
                f"{source}: not a readable CSV file ({exc}); expected a header and one row per document",
                source=source,
            ) from exc
        frame.columns = [str(c).strip() for c in frame.columns]
        if "length" not in frame.columns:
            raise no_length_column(source, list(frame.columns))
        return frame

    frame = load()
    wanted = [c for c in ("length", "step") if c in frame.columns]
    if all(frame[c].dtype == np.int64 for c in wanted):
        columns = [frame[c].to_numpy() for c in wanted]
    else:
        frame = load(dtype=str, keep_default_na=False)
        blank = (frame == "").all(axis=1).to_numpy()
        not_blank = np.flatnonzero(~blank)
        keep = int(not_blank[-1]) + 1 if not_blank.size else 0  # blank lines at the end are not rows
        columns = [frame[c].to_numpy(dtype=object)[:keep] for c in wanted]
    return columns[0], (columns[1] if len(columns) > 1 else None), None


def read_parquet(path: Path, source: str) -> Raw:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = userfile.read_bytes(path, WHAT, error=TraceError)
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceError(
            f"{source}: not a readable Parquet file ({exc}); expected a table with a 'length' column",
            source=source,
        ) from exc
    if "length" not in table.column_names:
        raise no_length_column(source, list(table.column_names))
    step = table.column("step").to_numpy() if "step" in table.column_names else None
    return table.column("length").to_numpy(), step, None


def _values(values: list[Any]) -> np.ndarray:
    """Parsed JSON values as a 1-D array: int64 or float64 when they are plain numbers, else objects."""
    kinds = set(map(type, values))
    if kinds <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    elif kinds <= {int, float}:
        return np.array(values, dtype=np.float64)
    return np.fromiter(values, dtype=object, count=len(values))


def _from_objects(rows: list[Any], source: str, lines: np.ndarray | None) -> Raw:
    """Raw ``length`` and ``step`` columns from a list of JSON objects (all rows have a step, or none)."""

    def fail(i: int, field: str, value: Any, problem: str, expected: str) -> TraceError:
        line = None if lines is None else int(lines[i])
        return TraceError.at_row(source, i + 1, field, value, problem, expected, line=line)

    n = len(rows)
    if sum(type(r) is dict for r in rows) < n:
        i = next(i for i, r in enumerate(rows) if type(r) is not dict)
        raise fail(i, "length", rows[i], "not a JSON object", _OBJECT_EXAMPLE)
    if sum("length" in r for r in rows) < n:
        i = next(i for i, r in enumerate(rows) if "length" not in r)
        raise fail(
            i, "length", None, f"object has no 'length' key (keys: {sorted(rows[i])})", _OBJECT_EXAMPLE
        )
    with_step = sum("step" in r for r in rows)
    if 0 < with_step < n:
        first_has = "step" in rows[0]
        i = next(i for i, r in enumerate(rows) if ("step" in r) != first_has)
        if first_has:
            raise fail(
                i, "step", None, "missing while earlier rows have it", "a 'step' in every row or in none"
            )
        raise fail(
            i,
            "step",
            rows[i]["step"],
            "present while earlier rows have none",
            "a 'step' in every row or none",
        )
    lengths = _values([r["length"] for r in rows])
    return lengths, (_values([r["step"] for r in rows]) if with_step else None), lines


def _no_constant(source: str) -> Any:
    def refuse(name: str) -> Any:
        raise TraceError(f"{source}: {name} is not a length; expected finite whole numbers of tokens",
                         source=source, value=name)

    return refuse


def read_jsonl(path: Path, source: str) -> Raw:
    """One JSON object per line, blank lines skipped; parsed in one call (line by line to find errors)."""
    texts = read_text(path, source)[1].splitlines()
    numbers = [k for k, text in enumerate(texts, start=1) if text.strip()]
    if not numbers:
        raise no_rows(source)
    joined = "[" + ",".join(texts[k - 1] for k in numbers) + "]"
    depth = userfile.json_depth(joined) - 1
    if depth > userfile.MAX_DEPTH:
        limit = userfile.MAX_DEPTH
        raise TraceError(f"{source}: a line nests {depth} levels deep, over the limit of {limit}; "
                         'expected one flat object per line such as {"length": 4096}', source=source)
    try:
        rows = json.loads(joined, parse_constant=_no_constant(source))
    except json.JSONDecodeError:
        rows = None
    if rows is None or len(rows) != len(numbers):  # a bad line, or one line holding several values
        for row, k in enumerate(numbers, start=1):
            text = texts[k - 1].strip()
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceError(
                    f"{source}: row {row} (line {k}): not valid JSON ({exc.msg}: {text[:60]!r}); "
                    'expected one object per line such as {"length": 4096}',
                    source=source,
                    row=row,
                    value=text[:60],
                ) from exc
        raise TraceError(f"{source}: not valid JSON Lines; expected one object per line", source=source)
    return _from_objects(rows, source, np.asarray(numbers, dtype=np.int64))


def read_json(path: Path, source: str) -> Raw:
    """A JSON list: plain lengths (the shape of public length dumps) or objects as in JSONL."""
    data = userfile.load_json(path, "JSON trace (a list of lengths or a list of objects)", error=TraceError)
    if not isinstance(data, list):
        raise TraceError(
            f"{source}: top-level JSON value is a {type(data).__name__}; "
            "expected a list of lengths or a list of objects with a 'length' key",
            source=source,
        )
    if not data:
        raise no_rows(source)
    if isinstance(data[0], dict):
        return _from_objects(data, source, None)
    i = next((i for i, v in enumerate(data) if isinstance(v, dict)), None)
    if i is not None:
        raise TraceError.at_row(
            source,
            i + 1,
            "length",
            data[i],
            "an object in a plain list of lengths",
            "plain numbers throughout (or objects throughout)",
        )
    return _values(data), None, None
