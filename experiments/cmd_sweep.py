"""Run a what-if grid: scenario fields × seeds × policies, in parallel processes, resumable.

The sweep file (TOML) names a base scenario, a [grid] table of field = [values], optional policies, seeds
and a [set] table of fixed fields (format: docs/experiments.md; example: experiments/sweeps/example.toml).
Every point × policy is stored in DIR/points/ as soon as it finishes; rerunning the same command skips
what is stored, so an interrupted sweep resumes where it stopped. A point that fails is recorded with its
error and the sweep goes on. Results: DIR/results.parquet and DIR/results.csv, one row per point × policy.

Examples:
  dcpsim sweep experiments/sweeps/example.toml -o sweep-out
  dcpsim sweep my_grid.toml -o out --workers 8
  dcpsim sweep my_grid.toml -o out --retry-errors        # rerun only the points that failed
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from dcpsim.experiments.options import positive_int
from dcpsim.experiments.progress import Progress

NAME = "sweep"
HELP = "run a what-if grid of scenario fields x seeds x policies (parallel, resumable)"
ORDER = 35


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("grid", metavar="GRID.toml", help="the sweep file")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="results directory (default: sweep-<name of the grid file>)")
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help=f"worker processes (default: the CPU count, {os.cpu_count() or 1}); 1 runs in-process")
    p.add_argument("--retry-errors", action="store_true", help="rerun the points whose stored result is an error")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.sweep import load_sweep, run_sweep

    sweep = load_sweep(args.grid)
    out = Path(args.output or f"sweep-{Path(args.grid).stem}")
    bars: dict[int, Progress] = {}

    def progress(done: int, total: int) -> None:
        bar = bars.setdefault(total, Progress("sweep", total, enabled=not args.no_progress))
        bar(done)

    def log(msg: str) -> None:
        print(f"dcpsim sweep: {msg}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    try:
        rep = run_sweep(sweep, out, workers=args.workers, retry_errors=args.retry_errors, progress=progress,
                        log=log)
    except KeyboardInterrupt:
        log(f"interrupted; finished points are stored in {out}/points — rerun the same command to resume")
        raise
    print(f"{sweep.num_points} points x {len(sweep.policies)} policies = {rep.total} results "
          f"({rep.computed} computed, {rep.reused} reused, {rep.failed} failed) in "
          f"{time.perf_counter() - t0:.1f} s; wrote {', '.join(str(p) for p in rep.files)}")
    return 0
