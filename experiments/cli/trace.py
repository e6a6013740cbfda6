"""Statistics of a length trace: a preset, a distribution written on the command line, or a trace file.

TRACE is a preset name ('dcpsim trace --list'), a distribution such as
'lognormal:mean=1024,sigma=1.5,min=128,max=8192' (docs/models.md, "Length distributions") or a trace file
(.csv, .parquet, .jsonl, .json). Presets and distributions are sampled (--count documents, --seed); a file
is read whole. With --context-len, documents longer than the context are first cut into context-sized
pieces, as global batches do. Printed: count, mean, percentiles, and above 8K, 32K and 128K tokens the
share of documents, of tokens and of causal-attention work (Σ L², which is what attention costs grow with).
--plot FILE draws the length histogram (log bins) with each bin's share of documents, tokens and Σ L².

Examples:
  dcpsim trace 256k
  dcpsim trace lognormal:mean=1024,sigma=1.5,min=128,max=8192 --count 50000 --seed 3 --json
  dcpsim trace my_lengths.csv --context-len 131072 --plot lengths.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.experiments.cli.args import positive_int
from dcpsim.traces import available_presets, get_preset, read_trace, split_long
from dcpsim.traces.spec import is_distribution_spec, resolve_length_source

NAME = "trace"
HELP = "statistics of a length trace (preset, distribution or file), optionally a histogram"
ORDER = 65
THRESHOLDS = (8192, 32768, 131072)
PERCENTILES = (50, 90, 99, 99.9)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", nargs="?", metavar="TRACE", help="preset name, distribution spec or trace file")
    p.add_argument("--list", action="store_true", help="list the trace presets")
    p.add_argument(
        "--count",
        type=positive_int,
        default=100_000,
        help="documents to sample from a preset or distribution (default 100000)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    p.add_argument(
        "--context-len", type=positive_int, help="cut longer documents into pieces of this many tokens"
    )
    p.add_argument("--plot", metavar="FILE", help="write the length histogram (PNG, PDF or SVG by extension)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def lengths_of(text: str, count: int, seed: int) -> np.ndarray:
    """The lengths a TRACE argument stands for (module docstring)."""
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


def run(args: argparse.Namespace) -> int:
    if args.list or not args.trace:
        for name in available_presets():
            pr = get_preset(name)
            print(f"{name:<10} context {pr.context_len:>9,}  {pr.description}")
        return 0
    lengths = lengths_of(args.trace, args.count, args.seed)
    if args.context_len:
        lengths = split_long(lengths, args.context_len)
    st = statistics(lengths)
    st["trace"] = args.trace
    if args.plot:
        plot(lengths, args.plot, args.trace)
        st["plot"] = args.plot
    if args.json:
        print(json.dumps(st, sort_keys=True))
        return 0
    pct = "  ".join(f"{k} {v:,.0f}" for k, v in st["percentiles"].items())
    print(
        f"trace {args.trace}: {st['count']:,} documents, {st['tokens']:,} tokens, mean {st['mean']:,.0f}, "
        f"min {st['min']:,}, max {st['max']:,}"
    )
    print(f"  {pct}")
    print(f"  {'above':<7} {'docs':>8} {'tokens':>8} {'Σ L²':>8}")
    for k, v in st["above"].items():
        print(f"  {k:<7} {v['docs']:>8.2%} {v['tokens']:>8.2%} {v['attention_work']:>8.2%}")
    if args.plot:
        print(f"  histogram written to {args.plot}", file=sys.stderr)
    return 0
