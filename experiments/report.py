"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

COMPARE_COLUMNS = (
    ("policy", "policy", "{}"),
    ("iter s", "iteration_time_s", "{:.2f}"),
    ("tok/s/GPU", "tokens_per_s_per_gpu", "{:,.0f}"),
    ("x first", "_ratio", "{:.2f}x"),
    ("MFU", "mfu", "{:.1%}"),
    ("PP bubble", "pipeline_bubble", "{:.1%}"),
    ("DP bubble", "dp_bubble", "{:.1%}"),
    ("mb skew max", "microbatch_skew_max", "{:.2f}"),
    ("±10%-tok ratio", "same_tokens_time_ratio", "{:.2f}"),
    ("CP comm s", "cp_comm_s", "{:.2f}"),
    ("mbs", "num_microbatches", "{:.0f}"),
    ("sched ms", "scheduling_time_s", "{:.1f}"),
    ("peak GiB", "peak_memory_gib", "{:.1f}"),
)


def format_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) if i else str(x).ljust(w)
                               for i, (x, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def compare_table(results: Sequence[dict[str, Any]]) -> str:
    base = results[0]["tokens_per_s"] if results else 1.0
    rows = []
    for r in results:
        r = dict(r, _ratio=r["tokens_per_s"] / base, scheduling_time_s=r["scheduling_time_s"] * 1e3)
        rows.append([fmt.format(r[key]) for _, key, fmt in COMPARE_COLUMNS])
    return format_table(rows, [h for h, _, _ in COMPARE_COLUMNS])
