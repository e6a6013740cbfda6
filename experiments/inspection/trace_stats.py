"""Statistics of a length trace (``dcpsim trace``): the lengths a TRACE argument stands for (a preset, a
distribution or a trace file), count, mean, percentiles, the shares above each threshold, and a histogram
(:func:`trace_statistics`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.traces import read_trace, split_long
from dcpsim.traces.spec import is_distribution_spec, resolve_length_source

THRESHOLDS = (8192, 32768, 131072)
PERCENTILES = (50, 90, 99, 99.9)


def lengths_of(text: str, count: int, seed: int) -> np.ndarray:
    """The lengths a TRACE argument stands for: a trace file's, or ``count`` sampled from a preset or a
    distribution with ``seed``."""
    if not is_distribution_spec(text) and Path(text).suffix:
        return np.asarray(read_trace(text).lengths, dtype=np.int64)
    return resolve_length_source(text).sample(count, seed)


def statistics(lengths: np.ndarray) -> dict[str, Any]:
    """Count, mean, percentiles and the shares above each threshold (documents, tokens, Σ L²)."""
    L = np.asarray(lengths, dtype=np.float64)
    work = L * L
    out: dict[str, Any] = {
        "count": int(L.size),
        "tokens": int(L.sum()),
        "mean": float(L.mean()),
        "min": int(L.min()),
        "max": int(L.max()),
        "percentiles": {f"p{p:g}": float(np.percentile(L, p)) for p in PERCENTILES},
        "above": {},
    }
    for t in THRESHOLDS:
        sel = L > t
        out["above"][f"{t // 1024}K"] = {
            "docs": float(sel.mean()),
            "tokens": float(L[sel].sum() / L.sum()),
            "attention_work": float(work[sel].sum() / work.sum()),
        }
    return out


def plot(lengths: np.ndarray, path: str, title: str) -> None:
    """Histogram over log-spaced length bins: shares of documents, tokens and Σ L² per bin."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    L = np.asarray(lengths, dtype=np.float64)
    lo, hi = np.log2(max(1.0, L.min())), np.log2(L.max()) + 1e-9
    edges = 2.0 ** np.linspace(np.floor(lo), np.ceil(hi), int(2 * (np.ceil(hi) - np.floor(lo))) + 1)
    docs, _ = np.histogram(L, edges)
    toks, _ = np.histogram(L, edges, weights=L)
    work, _ = np.histogram(L, edges, weights=L * L)
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    centers = np.sqrt(edges[:-1] * edges[1:])
    widths = np.diff(edges)
    ax.bar(centers, docs / docs.sum(), width=widths * 0.9, color="#9ecae1", label="documents")
    ax.step(edges[:-1], toks / toks.sum(), where="post", color="#1f77b4", label="tokens")
    ax.step(edges[:-1], work / work.sum(), where="post", color="#d62728", label="attention work Σ L²")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("document length (tokens)")
    ax.set_ylabel("share per bin")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def trace_statistics(trace: str, count: int = 100_000, seed: int = 0, context_len: int | None = None,
                     plot_path: str | None = None) -> dict[str, Any]:
    """:func:`statistics` of the lengths ``trace`` stands for (longer documents cut into pieces of
    ``context_len`` when given), naming the trace; the histogram written to ``plot_path`` when given."""
    lengths = lengths_of(trace, count, seed)
    if context_len:
        lengths = split_long(lengths, context_len)
    st = statistics(lengths)
    st["trace"] = trace
    if plot_path:
        plot(lengths, plot_path, trace)
        st["plot"] = plot_path
    return st
