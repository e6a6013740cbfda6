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
import sys
from contextlib import nullcontext

from dcpsim.experiments.cli.args import positive_int
from dcpsim.experiments.output.write import dumps_json

NAME = "trace"
HELP = "statistics of a length trace (preset, distribution or file), optionally a histogram"
ORDER = 65


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


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.inspection.trace_stats import trace_statistics
    from dcpsim.traces import available_presets, get_preset

    if args.list or not args.trace:
        for name in available_presets():
            pr = get_preset(name)
            print(f"{name:<10} context {pr.context_len:>9,}  {pr.description}")
        return 0
    from dcpsim.experiments.output.write import Outputs

    with Outputs({"--plot": args.plot}, {"trace": args.trace}, images=("--plot",)) as outs:
        with outs.writing("--plot") if args.plot else nullcontext() as tmp:
            st = trace_statistics(args.trace, args.count, args.seed, args.context_len,
                                  str(tmp) if tmp else None)
        if args.plot:
            st["plot"] = args.plot
    if args.json:
        print(dumps_json(st, "--json", sort_keys=True))
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
