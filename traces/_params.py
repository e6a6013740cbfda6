"""Checks for scalar function parameters (counts, token budgets, seeds, distribution parameters)."""

from __future__ import annotations

import math
import numbers
from typing import Any

from dcpsim.traces.errors import TraceError


def require_int(value: Any, param: str, minimum: int, context: str) -> int:
    """``value`` as a Python int if it is an integer ≥ ``minimum`` (booleans rejected), else TraceError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise TraceError.bad_param(param, value, f"an integer >= {minimum}", context)
    return int(value)


def require_real(
    value: Any,
    param: str,
    context: str,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
) -> float:
    """``value`` as a float if it is a finite real in [low, high] ((low, high] when ``low_open``)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise TraceError.bad_param(param, value, f"a finite number in {bracket}{low:g}, {high:g}]", context)
    return float(value)
