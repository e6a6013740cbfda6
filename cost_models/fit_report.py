"""What :func:`cost_models.fitting.fit_calibration` reports: one :class:`OpFit` per calibrated term, the whole
:class:`FitReport`, and the number formatting the fits share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dcpsim.cost_models.calibration import SaturatingCurve

GroupKey = tuple[str, str, int, int]  # (kernel, op, causal, head_dim) of an attention group


def round_sig(x: float, digits: int = 6) -> float:
    """``x`` rounded to ``digits`` significant digits (stable JSON across platforms)."""
    return float(f"{x:.{digits}g}")


def abs_rel_errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Absolute relative errors of ``pred`` against ``meas``."""
    return np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)


@dataclass(frozen=True)
class OpFit:
    """One calibrated term: its key (``attn_fwd``, ``gemm``, ``all_gather:nvlink``, ...), how it was obtained
    (``fitted``, ``derived``, ``base``), the rows used, and mean / max absolute relative error on them."""

    key: str
    how: str
    params: dict[str, float]
    rows: int = 0
    mape: float = math.nan
    max_ape: float = math.nan
    note: str = ""


@dataclass(frozen=True)
class FitReport:
    """What :func:`cost_models.fitting.fit_calibration` did: the calibrated terms, every attention group's own curve
    (for plots), and the leave-one-out median error per kernel."""

    name: str
    kernel: str | None
    head_dim: int | None
    terms: tuple[OpFit, ...]
    groups: dict[GroupKey, SaturatingCurve] = field(default_factory=dict)
    group_mape: dict[GroupKey, float] = field(default_factory=dict)
    loo_median: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # terms that could not be fitted and kept the base (one line each)

    def term(self, key: str) -> OpFit:
        return next(t for t in self.terms if t.key == key)
