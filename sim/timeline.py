"""The Timeline: one record per operation of one iteration, simulated or measured.

The columns are declared once, in :data:`SCHEMA` (name, numpy dtype, unit, meaning and, for text columns,
the only valid values); :data:`COLUMNS` is their names in order. The simulator builds a Timeline column-wise
(``sim.simulate.build_timeline``); ``real_runtime`` builds one per (workload, iteration) from its measured
records with :meth:`Timeline.from_records` (and reads its ``timeline.csv`` back with
:meth:`Timeline.from_frame`), so both go through the same metrics (``sim.metrics.compute_metrics``) and
``dcpsim validate`` compares like with like.

A Timeline's columns are numpy arrays of equal length, one row per record, in the schema's dtypes (the
constructor converts). The builders from outside data (:meth:`~Timeline.from_records`,
:meth:`~Timeline.from_frame`) also check every value (:meth:`~Timeline.check`), and say which row, column and
value is wrong and what would be valid. Importing this module does not import pandas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class TimelineError(ValueError):
    """A timeline (or a record of one) that does not fit :data:`SCHEMA`."""


@dataclass(frozen=True)
class Column:
    """One column of the timeline schema."""

    name: str
    dtype: str  # numpy dtype; "str" for text
    unit: str  # "" where none
    doc: str
    values: tuple[str, ...] | None = None  # the only valid values of a text column


SCHEMA: tuple[Column, ...] = (
    Column("stage", "int32", "", "pipeline stage, 0 … num_stages − 1"),
    Column("rank", "int32", "", "pool rank (one TP group) within the stage, 0 … pool_size − 1"),
    Column("microbatch", "int32", "", "microbatch index in plan order; −1 for the gradient sync rows"),
    Column("phase", "str", "", "'F' forward, 'B' backward, 'S' gradient sync and optimizer step",
           ("F", "B", "S")),
    Column("kind", "str", "", "'compute', 'comm' (exposed communication) or 'idle' (the DP wait before the "
           "sync)", ("compute", "comm", "idle")),
    Column("comm", "str", "", "for kind 'comm': 'cp', 'pp', 'dp', 'tp' or 'ep' (MoE expert-parallel "
           "all-to-alls); '' otherwise", ("", "cp", "pp", "dp", "tp", "ep")),
    Column("start", "float64", "s", "seconds from the start of the iteration"),
    Column("end", "float64", "s", "seconds from the start of the iteration, ≥ start"),
    Column("tokens", "float64", "tokens",
           "tokens this rank holds in the operation (Σ L / degree); 0 for sync rows"),
)
COLUMNS: tuple[str, ...] = tuple(c.name for c in SCHEMA)
_BY_NAME = {c.name: c for c in SCHEMA}


def _dtype(col: Column) -> Any:
    return str if col.dtype == "str" else np.dtype(col.dtype)


def _as_column(col: Column, values: Any) -> np.ndarray:
    """``values`` as a 1-D array of ``col``'s dtype (no copy when it already is one)."""
    try:
        arr = np.asarray(values, dtype=_dtype(col))
    except (TypeError, ValueError) as e:
        raise TimelineError(f"timeline column {col.name!r} cannot be read as {col.dtype}: {e}") from None
    if arr.ndim != 1:
        raise TimelineError(f"timeline column {col.name!r} has shape {arr.shape}; expected one value per "
                            "record")
    return arr


@dataclass(frozen=True)
class Timeline:
    """Records of one iteration, stored column-wise in :data:`SCHEMA`'s dtypes (see the module docstring).

    ``columns`` maps every schema column to its array; other keys are dropped.
    """

    columns: Mapping[str, np.ndarray]
    num_stages: int
    pool_size: int

    def __post_init__(self) -> None:
        missing = [c for c in COLUMNS if c not in self.columns]
        if missing:
            raise TimelineError(f"timeline lacks column(s) {missing}; required: {', '.join(COLUMNS)}")
        cols = {c.name: _as_column(c, self.columns[c.name]) for c in SCHEMA}
        n = {len(v) for v in cols.values()}
        if len(n) > 1:
            raise TimelineError(f"timeline columns differ in length: {sorted(n)}")
        if self.num_stages < 1 or self.pool_size < 1:
            raise TimelineError(f"timeline has num_stages = {self.num_stages}, pool_size = {self.pool_size}; "
                                "expected both ≥ 1")
        object.__setattr__(self, "columns", cols)

    def __len__(self) -> int:
        return len(self.columns["start"])

    def __getitem__(self, col: str) -> np.ndarray:
        return self.columns[col]

    @property
    def duration(self) -> np.ndarray:
        return self.columns["end"] - self.columns["start"]

    @property
    def iteration_time(self) -> float:
        return float(self.columns["end"].max()) if len(self) else 0.0

    def check(self, source: str = "timeline") -> Timeline:
        """Raise :class:`TimelineError` at the first value outside the schema (naming ``source``, the row,
        the column, the value and what is valid); return ``self``. Rows are counted from 0."""
        bounds = {"stage": (0, self.num_stages - 1), "rank": (0, self.pool_size - 1),
                  "microbatch": (-1, None)}
        for name, (lo, hi) in bounds.items():
            v = self.columns[name]
            bad = np.flatnonzero((v < lo) | (v > hi) if hi is not None else v < lo)
            if bad.size:
                i = int(bad[0])
                valid = f"{lo} … {hi}" if hi is not None else f"≥ {lo}"
                raise TimelineError(f"{source}: row {i}, column {name!r} = {int(v[i])}; expected {valid}")
        for col in SCHEMA:
            if col.values is not None:
                v = self.columns[col.name]
                bad = np.flatnonzero(~np.isin(v, col.values))
                if bad.size:
                    i = int(bad[0])
                    raise TimelineError(f"{source}: row {i}, column {col.name!r} = {str(v[i])!r}; valid: "
                                        f"{', '.join(repr(x) for x in col.values)}")
        start, end, tokens = self.columns["start"], self.columns["end"], self.columns["tokens"]
        for name, v in (("start", start), ("end", end), ("tokens", tokens)):
            bad = np.flatnonzero(~np.isfinite(v) | (v < 0))
            if bad.size:
                i = int(bad[0])
                raise TimelineError(f"{source}: row {i}, column {name!r} = {float(v[i])!r}; expected a "
                                    "finite number ≥ 0")
        bad = np.flatnonzero(end < start)
        if bad.size:
            i = int(bad[0])
            raise TimelineError(f"{source}: row {i} ends at {float(end[i])!r} s, before its start "
                                f"{float(start[i])!r} s; expected end ≥ start")
        comm_rows = self.columns["kind"] == "comm"
        mismatch = np.flatnonzero(comm_rows != (self.columns["comm"] != ""))
        if mismatch.size:
            i = int(mismatch[0])
            raise TimelineError(f"{source}: row {i} has kind {str(self.columns['kind'][i])!r} and comm "
                                f"{str(self.columns['comm'][i])!r}; a 'comm' row names its communication, "
                                "every other row has comm ''")
        return self

    @staticmethod
    def from_records(records: Iterable[Mapping[str, Any]], num_stages: int, pool_size: int,
                     source: str = "timeline records") -> Timeline:
        """From records (mappings with at least every schema column; other keys are ignored), checked.

        This is how ``real_runtime`` turns its measured rows into a Timeline."""
        cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        for i, r in enumerate(records):
            for c in COLUMNS:
                try:
                    cols[c].append(r[c])
                except KeyError:
                    raise TimelineError(f"{source}: record {i} lacks column {c!r}; every record needs "
                                        f"{', '.join(COLUMNS)}") from None
        arrays = {c: _as_column(_BY_NAME[c], v) if v else np.zeros(0, dtype=_dtype(_BY_NAME[c]))
                  for c, v in cols.items()}
        return Timeline(arrays, num_stages, pool_size).check(source)

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({c: self.columns[c] for c in COLUMNS})

    @staticmethod
    def from_frame(df: pd.DataFrame, num_stages: int | None = None, pool_size: int | None = None,
                   source: str = "timeline") -> Timeline:
        """From a DataFrame with the schema's columns (other columns are ignored), checked; e.g. one iteration
        of a measured ``timeline.csv`` (read with ``keep_default_na=False``, so that comm '' stays ''). The
        stage and pool sizes default to the largest stage and rank present, plus one."""
        missing = [c for c in COLUMNS if c not in df]
        if missing:
            raise TimelineError(f"{source}: lacks column(s) {missing}; required: {', '.join(COLUMNS)}")
        cols = {c: df[c].to_numpy() for c in COLUMNS}
        stages = num_stages or (int(df["stage"].max()) + 1 if len(df) else 1)
        pool = pool_size or (int(df["rank"].max()) + 1 if len(df) else 1)
        return Timeline(cols, stages, pool).check(source)
