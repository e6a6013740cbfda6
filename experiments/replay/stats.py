"""Error statistics of predicted against measured times (per iteration)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ErrorStats:
    n: int
    mape: float  # mean |predicted / measured − 1|
    mean_error: float  # mean (predicted / measured − 1): < 0 means dcpsim is optimistic
    corr: float  # Pearson correlation of predicted and measured (nan for fewer than 2 or constant values)
    max_ape: float

    def to_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "mape": self.mape, "mean_error": self.mean_error, "corr": self.corr,
                "max_ape": self.max_ape}


def error_stats(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> ErrorStats:
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    e = p / m - 1.0
    varies = len(p) > 1 and np.std(p) > 1e-9 * abs(np.mean(p)) and np.std(m) > 0
    corr = float(np.corrcoef(p, m)[0, 1]) if varies else float("nan")
    return ErrorStats(len(p), float(np.mean(np.abs(e))), float(np.mean(e)), corr, float(np.max(np.abs(e))))


def kfold_indices(n: int, k: int) -> list[np.ndarray]:
    """``k`` held-out index sets of ``0..n-1``: iteration i in fold i mod k (deterministic, interleaved, so
    every fold spans the run)."""
    k = max(1, min(k, n))
    return [np.arange(f, n, k) for f in range(k)]
