"""The Timeline: one record per operation of one iteration.

Columns (numpy arrays of equal length, one row per record):

==========  ========  ====================================================================================
stage       int32     pipeline stage
rank        int32     pool rank (one TP group) within the stage
microbatch  int32     microbatch index, −1 for the gradient sync
phase       str       'F' forward, 'B' backward, 'S' gradient sync and optimizer step
kind        str       'compute', 'comm' (exposed communication) or 'idle' (the DP wait before the sync)
comm        str       for kind 'comm': 'cp', 'pp', 'dp' or 'tp'; '' otherwise
start, end  float64   seconds from the start of the iteration
tokens      float64   tokens this rank holds in the operation (Σ L / degree); 0 for sync rows
==========  ========  ====================================================================================

``real_runtime`` writes the same columns from measurements, so ``dcpsim validate`` can compare the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

COLUMNS = ("stage", "rank", "microbatch", "phase", "kind", "comm", "start", "end", "tokens")


@dataclass(frozen=True)
class Timeline:
    """Records of one iteration, stored column-wise (see the module docstring)."""

    columns: Mapping[str, np.ndarray]
    num_stages: int
    pool_size: int

    def __post_init__(self) -> None:
        missing = [c for c in COLUMNS if c not in self.columns]
        if missing:
            raise ValueError(f"timeline lacks column(s) {missing}; required: {', '.join(COLUMNS)}")
        n = {len(v) for v in self.columns.values()}
        if len(n) > 1:
            raise ValueError(f"timeline columns differ in length: {sorted(n)}")

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

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({c: self.columns[c] for c in COLUMNS})

    @staticmethod
    def from_frame(df: pd.DataFrame, num_stages: int | None = None, pool_size: int | None = None) -> Timeline:
        """From a DataFrame with the schema's columns (e.g. one measured by real_runtime)."""
        cols = {c: df[c].to_numpy() for c in COLUMNS if c in df}
        t = Timeline(cols, num_stages or int(df["stage"].max()) + 1, pool_size or int(df["rank"].max()) + 1)
        return t
