"""A sweep's results table, written in bounded memory: ``results.parquet`` and ``results.csv``.

A grid of 100,000 tasks must not need its 100,000 records in memory at once, so the table is written from a
*row source* (a function returning a fresh iterator of row dicts, in table order: the sweep reads the stored
records one at a time) in two streaming passes:

1. the columns (in order of first appearance, with ``last`` moved to the end) and, per column, the kinds of
   value seen and whether some row lacks it;
2. chunks of ``chunk_rows`` rows, converted to one fixed Arrow schema, appended to a ``pyarrow``
   ``ParquetWriter`` and to the CSV.

The schema is what pandas would give the whole table at once: integers → int64, or float64 (NaN) when some
row lacks the value; integers mixed with floats → float64; booleans → bool; strings → string; a column whose
values mix other kinds (a grid over ``trace = ["32k", 7]``, say) → strings; a column with no value at all →
null. So the file's content does not depend on the chunking, on the order tasks finished in, nor on the
backend that ran them. Both files are written to temporary names and renamed.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

RowSource = Callable[[], Iterable[dict[str, Any]]]


def _kind(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return "other"


def _arrow_type(kinds: set[str], missing: bool) -> pa.DataType:
    if not kinds:
        return pa.null()
    if kinds == {"int"}:
        return pa.float64() if missing else pa.int64()
    if kinds <= {"int", "float"}:
        return pa.float64()
    if kinds == {"bool"}:
        return pa.bool_()
    return pa.string()


def table_schema(rows: Iterable[dict[str, Any]], last: tuple[str, ...] = ()) -> tuple[pa.Schema, int]:
    """Pass 1: the schema of the rows (see the module docstring) and the row count."""
    kinds: dict[str, set[str]] = {}
    present: dict[str, int] = {}
    n = 0
    for row in rows:
        n += 1
        for k, v in row.items():
            kinds.setdefault(k, set())
            present[k] = present.get(k, 0) + 1
            kind = _kind(v)
            if kind is not None:
                kinds[k].add(kind)
            else:
                present[k] -= 1
    order = [c for c in kinds if c not in last] + [c for c in last if c in kinds]
    return pa.schema([(c, _arrow_type(kinds[c], present[c] < n)) for c in order]), n


def _convert(v: Any, t: pa.DataType) -> Any:
    if _kind(v) is None:
        return None
    if pa.types.is_string(t):
        return v if isinstance(v, str) else str(v)
    if pa.types.is_floating(t):
        return float(v)
    return v


def _chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    buf: list[dict[str, Any]] = []
    for r in rows:
        buf.append(r)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


def write_results(source: RowSource, out_dir: Path, last: tuple[str, ...] = ("error", "elapsed_s"),
                  chunk_rows: int = 4096) -> tuple[list[Path], int]:
    """Write ``results.parquet`` and ``results.csv`` from ``source`` (read twice); return (paths, rows)."""
    schema, n = table_schema(source(), last)
    paths = [out_dir / "results.parquet", out_dir / "results.csv"]
    tmp = [p.with_name(f".{p.name}.{os.getpid()}.tmp") for p in paths]
    types = {f.name: f.type for f in schema}
    with pq.ParquetWriter(tmp[0], schema) as pw, open(tmp[1], "w", newline="") as fc:
        if len(schema):
            csv.writer(fc).writerow(schema.names)
        for chunk in _chunks(source(), chunk_rows):
            cols = {c: [_convert(r.get(c), t) for r in chunk] for c, t in types.items()}
            table = pa.Table.from_pydict(cols, schema=schema)
            pw.write_table(table)
            table.to_pandas().to_csv(fc, header=False, index=False)
        if n == 0:
            pw.write_table(schema.empty_table())
    for t, p in zip(tmp, paths):
        os.replace(t, p)
    return paths, n
