"""Run a what-if grid: scenario fields × seeds × policies, in parallel processes or on Ray, resumable.

The sweep file (TOML) names a base scenario, a [grid] table of field = [values], optional policies, seeds
and a [set] table of fixed fields (format: docs/experiments.md; example: experiments/sweeps/example.toml).
Every point × policy is stored in DIR/points/ as soon as it finishes; rerunning the same command skips
what is stored, so an interrupted sweep resumes where it stopped. A point that fails is recorded with its
error and the sweep goes on. Results: DIR/results.parquet and DIR/results.csv, one row per point × policy.
A stored result is reused only while its scenario, policy, named files (trace, calibration, GPU) and the code
version are unchanged. A sweep holds at most 100,000 tasks (points x policies); a larger grid is refused
before any task is built (split it into several sweeps). The first line (points, policies, tasks) comes
before the tasks are built; building them takes about 0.1 ms each (9 s at the cap).

--backend ray runs the tasks as Ray tasks, on a running cluster (--address auto or HOST:PORT) or on a local
Ray instance of --workers CPUs; this process stores the results (needs the ray extra: pip install
"dcpsim[ray]").

Examples:
  dcpsim sweep experiments/sweeps/example.toml -o sweep-out
  dcpsim sweep my_grid.toml -o out --workers 8
  dcpsim sweep my_grid.toml -o out --retry-errors        # rerun only the points that failed
  dcpsim sweep my_grid.toml -o out --backend ray --address auto   # on the Ray cluster this node joined
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from dcpsim.experiments.cli.args import positive_int, typed
from dcpsim.experiments.output.progress import Progress

NAME = "sweep"
HELP = "run a what-if grid of scenario fields x seeds x policies (parallel, resumable)"
ORDER = 35


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("grid", metavar="GRID.toml", help="the sweep file")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="results directory (default: sweep-<name of the grid file>)")
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help=f"worker processes (default: the CPU count, {os.cpu_count() or 1}); 1 runs "
                        "in-process; with --backend ray and no --address: the CPUs of the local Ray instance")
    p.add_argument("--retry-errors", action="store_true", help="rerun the points whose stored result is an error")
    p.add_argument("--backend", choices=("process", "ray"), default="process",
                   help="process: a local process pool (default); ray: Ray tasks (needs the ray extra)")
    p.add_argument("--address", metavar="ADDR",
                   help="with --backend ray: the cluster to join (auto, HOST:PORT, ray://HOST:PORT); "
                        "default: start a local Ray instance of --workers CPUs for this run")
    p.add_argument("--max-retries", type=typed(int, ge=0), default=3,
                   help="retries of a task whose worker process died (default 3); then it is stored as an "
                        "error")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.errors import ScenarioError
    from dcpsim.experiments.sweep.driver import run_sweep
    from dcpsim.experiments.sweep.grid import load_sweep

    if args.address and args.backend != "ray":
        raise ScenarioError(f"--address {args.address}: only with --backend ray")
    if args.backend == "ray":
        from dcpsim.experiments.sweep.ray import import_ray

        import_ray()  # a missing Ray is one line, before any work
    sweep = load_sweep(args.grid)
    out = Path(args.output or f"sweep-{Path(args.grid).stem}")
    bars: dict[int, Progress] = {}

    def progress(done: int, total: int) -> None:
        bar = bars.setdefault(total, Progress("sweep", total, enabled=not args.no_progress))
        bar(done)

    def log(msg: str) -> None:   # above the bar while one is drawn (a per-point error), never into it
        bar = next(iter(bars.values()), None)
        if bar is not None:
            bar.write(f"dcpsim sweep: {msg}")
        else:
            print(f"dcpsim sweep: {msg}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    try:
        rep = run_sweep(sweep, out, workers=args.workers, retry_errors=args.retry_errors, progress=progress,
                        log=log, backend=args.backend, address=args.address, max_retries=args.max_retries)
    except KeyboardInterrupt:
        for bar in bars.values():
            bar.close()
        log(f"interrupted; finished points are stored in {out}/points — rerun the same command to resume")
        raise
    print(f"{sweep.num_points} points x {len(sweep.policies)} policies = {rep.total} results "
          f"({rep.computed} computed, {rep.reused} reused, {rep.failed} failed) in "
          f"{time.perf_counter() - t0:.1f} s; wrote {', '.join(str(p) for p in rep.files)}")
    return 0
