"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dcpsim.sim.metric_spec import Metric, declarations  # numpy only: this module loads no pandas

if TYPE_CHECKING:
    from dcpsim.experiments.runner import RunSummary


def format_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) if i else str(x).ljust(w)
                               for i, (x, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def compare_columns(metrics_type: type | None = None) -> tuple[Metric, ...]:
    """The metrics ``dcpsim compare`` shows, in declaration order: those declared with a table column
    (on ``sim.metrics.Metrics`` unless another metrics type is given)."""
    if metrics_type is None:
        from dcpsim.sim.metrics import Metrics

        metrics_type = Metrics
    return tuple(d for d in declarations(metrics_type) if d.table is not None)


def compare_table(results: Sequence[RunSummary]) -> str:
    """The policy label, then one column per table metric; a ``relative`` column is over the first row."""
    decls = compare_columns(type(results[0].metrics)) if results else compare_columns()
    cols = [(d.name, d.table) for d in decls if d.table is not None]
    first = results[0].metrics if results else None
    rows = [[r.policy, *(col.cell(getattr(r.metrics, name), getattr(first, name)) for name, col in cols)]
            for r in results]
    return format_table(rows, ["policy", *(col.header for _, col in cols)])
