"""How a metric is declared: its unit, its aggregation over a run's iterations, its column in the table.

A metric is a field of a frozen dataclass (``sim.metrics.Metrics``) whose default is :func:`metric`::

    cp_comm_s: float = metric("s", MEAN, table=Column("CP comm s", "{:.2f}"))

Everything that lists metrics reads these declarations (:func:`declarations`) and nothing else: the run
summary (:func:`aggregate`), ``dcpsim compare``'s table (the metrics with a ``table`` column, in field order),
``--json``, sweep rows and figure rows (every declared metric). So adding a metric is adding its field.
docs/metrics.md explains each choice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

HOWS = ("mean", "max", "min", "sum", "ratio")


@dataclass(frozen=True)
class Over:
    """How a run combines one metric's per-iteration values.

    ``mean`` (arithmetic, numpy), ``max``, ``min``, ``sum``; or ``ratio``: Σ ``numerator`` / Σ ``denominator``
    over the iterations (divided by the run's GPU count when ``per_gpu``), the right mean for a rate such as
    tokens/s (Σ tokens / Σ seconds, not the mean of the per-iteration rates). A zero denominator gives 0.0.
    """

    how: str
    numerator: str = ""
    denominator: str = ""
    per_gpu: bool = False

    def __post_init__(self) -> None:
        if self.how not in HOWS:
            raise ValueError(f"aggregation {self.how!r} is not one of {', '.join(HOWS)}")
        if (self.how == "ratio") != bool(self.numerator and self.denominator):
            raise ValueError("a 'ratio' aggregation, and only it, names a numerator and a denominator field")

    def reduce(self, ms: Sequence[Any], name: str, num_gpus: int) -> Any:
        """The run's value of field ``name`` from its per-iteration records ``ms``."""
        if self.how == "ratio":
            num = sum(getattr(m, self.numerator) for m in ms)
            den = sum(getattr(m, self.denominator) for m in ms)
            r = num / den if den > 0 else 0.0
            return r / num_gpus if self.per_gpu else r
        vals = [getattr(m, name) for m in ms]
        if self.how == "mean":
            return float(np.mean(vals))
        if self.how == "max":
            return max(vals)
        if self.how == "min":
            return min(vals)
        return sum(vals)

    def describe(self) -> str:
        """In words, for docs and ``--help``: 'mean', 'Σ tokens / Σ iteration_time_s / GPUs', ..."""
        if self.how != "ratio":
            return self.how
        return f"Σ {self.numerator} / Σ {self.denominator}" + (" / GPUs" if self.per_gpu else "")


MEAN, MAX, MIN, SUM = Over("mean"), Over("max"), Over("min"), Over("sum")


def ratio(numerator: str, denominator: str, per_gpu: bool = False) -> Over:
    """Σ numerator / Σ denominator over the iterations (per GPU if asked)."""
    return Over("ratio", numerator, denominator, per_gpu)


@dataclass(frozen=True)
class Column:
    """A metric's column in ``dcpsim compare``'s table.

    ``fmt`` is a ``str.format`` pattern (``"{:.1%}"`` for a percentage, ``"{:,.0f}"`` for thousands);
    the value is multiplied by ``scale`` first (seconds → ms: 1e3); with ``relative`` the cell is the value
    over the first row's value (the throughput ratio to the first policy).
    """

    header: str
    fmt: str = "{:.2f}"
    scale: float = 1.0
    relative: bool = False

    def cell(self, value: float, first: float) -> str:
        v = value
        if self.relative:
            v = value / first if first else float("nan")
        return self.fmt.format(v * self.scale if self.scale != 1.0 else v)


@dataclass(frozen=True)
class Metric:
    """The declaration of one metric (``name`` is its field's name)."""

    name: str
    unit: str
    over: Over
    table: Column | None = None
    wall_clock: bool = False  # a measured wall time: not reproducible, so ``--json`` zeroes it unless --timings


def metric(unit: str, over: Over, *, table: Column | None = None, wall_clock: bool = False,
           default: Any = dataclasses.MISSING) -> Any:
    """Declare a metric field: ``name: float = metric(unit, over, table=Column(...))``."""
    return dataclasses.field(default=default, metadata={"metric": Metric("", unit, over, table, wall_clock)})


def declarations(cls: type) -> tuple[Metric, ...]:
    """The metrics declared on dataclass ``cls``, in field order. Every field must be declared with
    :func:`metric`, and a ratio must name fields of ``cls``: a slip is a ``TypeError`` at import."""
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    out = []
    for f in fields:
        decl = f.metadata.get("metric")
        if not isinstance(decl, Metric):
            raise TypeError(f"{cls.__name__}.{f.name} is not declared: give it '= metric(unit, aggregation)'")
        for ref in (decl.over.numerator, decl.over.denominator):
            if ref and ref not in names:
                raise TypeError(f"{cls.__name__}.{f.name}: its ratio names {ref!r}, which is not a field")
        out.append(dataclasses.replace(decl, name=f.name))
    return tuple(out)


def aggregate(ms: Sequence[Any], num_gpus: int) -> Any:
    """One record of the same type for a whole run: every field combined over ``ms`` as it is declared."""
    if not ms:
        raise ValueError("no iterations to aggregate")
    cls = type(ms[0])
    return cls(**{d.name: d.over.reduce(ms, d.name, num_gpus) for d in declarations(cls)})


def without_wall_clock(m: Any) -> Any:
    """``m`` with every wall-clock metric set to 0.0 (reproducible output)."""
    return dataclasses.replace(m, **{d.name: 0.0 for d in declarations(type(m)) if d.wall_clock})
