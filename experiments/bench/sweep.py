"""Sweep throughput: tasks/s of a grid of small points on the local process pool and on Ray, in one run.

    .venv/bin/python experiments/bench/sweep.py [--tasks 1000] [--workers N] [--backends process,ray]
                                                [--address ADDR]

The grid: the ``tiny`` model (2 layers, hidden 128) on H100, TP 1, PP 2, pools of 2, 4 and 8 ranks at
8K context, 64K-token batches of the ``32k`` preset, one iteration, policies static-cp and mcore-dcp, and as
many seeds as make ``--tasks`` tasks (about 1 ms to 20 ms of simulation each: the benchmark measures the
sweep machinery — submission, transfer of records, the store, the results table — more than the simulator).
Each backend runs the same grid into a fresh output directory; ``s`` is the wall time of ``run_sweep``
(planning, storing every record, writing results.parquet/csv). The Ray instance (local, ``--workers``
CPUs, unless ``--address``) is started before the clock starts; its start-up is printed on its own.
Ray's workers import dcpsim on their first task, inside the timed run, as the process pool's do.

Prints one line per backend, and Ray's tasks/s as a ratio to the process pool's. For publication, run it on
an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

try:  # run by a Python without dcpsim (the system one): one line saying which to use, not a traceback
    import dcpsim  # noqa: F401
except ModuleNotFoundError:
    print(f"{sys.argv[0]}: dcpsim is not installed for {sys.executable}; run it with the venv's Python: "
          f".venv/bin/python {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)

from dcpsim.experiments.sweep.driver import run_sweep
from dcpsim.experiments.sweep.grid import load_sweep

BASE = """
model = "tiny"
gpu = "h100"
tp = 1
pp = 2
pool = 4
context_len = 8192
global_batch_tokens = 65536
trace = "32k"
iterations = 1
"""

POOLS = (2, 4, 8)
POLICIES = ("static-cp", "mcore-dcp")


def grid_text(tasks: int) -> str:
    seeds = max(1, -(-tasks // (len(POOLS) * len(POLICIES))))
    return (f'base = "base.toml"\npolicies = {list(POLICIES)!r}\nseeds = {list(range(seeds))!r}\n'
            f"[grid]\npool = {list(POOLS)!r}\n").replace("'", '"')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000, help="tasks in the grid (rounded up to whole seeds)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="processes of the pool, CPUs of the local Ray instance (default: the CPU count)")
    ap.add_argument("--backends", default="process,ray", help="comma-separated: process, ray")
    ap.add_argument("--address", help="a Ray cluster to use instead of a local instance")
    ap.add_argument("--keys-only", action="store_true",
                    help="only build the task list (every key hashed) and print ms and KiB per task: what "
                         "sweep.grid.MAX_TASKS is sized by")
    args = ap.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        root = Path(tmp)
        (root / "base.toml").write_text(BASE)
        (root / "grid.toml").write_text(grid_text(args.tasks))
        sweep = load_sweep(root / "grid.toml")
        n = sweep.num_points * len(sweep.policies)
        print(f"grid: {sweep.num_points} points x {len(sweep.policies)} policies = {n} tasks; "
              f"workers {args.workers}; cpus {os.cpu_count()}")
        if args.keys_only:
            import tracemalloc

            t0 = time.perf_counter()
            tasks = sweep.tasks()
            dt = time.perf_counter() - t0
            del tasks
            tracemalloc.start()  # a second build, for its memory (tracemalloc slows it down)
            tasks = sweep.tasks()
            held = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            print(f"task list: {len(tasks)} tasks in {dt:.2f} s: {dt / len(tasks) * 1e3:.3f} ms/task, "
                  f"{held / len(tasks) / 1024:.2f} KiB/task held")
            return 0
        for backend in backends:
            ray = None
            if backend == "ray":
                from dcpsim.experiments.sweep.ray import connect, import_ray

                ray = import_ray()
                t0 = time.perf_counter()
                connect(ray, args.address, args.workers)
                print(f"ray: instance {'joined' if args.address else 'started'} in "
                      f"{time.perf_counter() - t0:.1f} s; cluster CPUs "
                      f"{ray.cluster_resources().get('CPU', 0):.0f}")
            t0 = time.perf_counter()
            rep = run_sweep(sweep, root / f"out-{backend}", workers=args.workers, backend=backend)
            dt = time.perf_counter() - t0
            if ray is not None:
                ray.shutdown()
            rates[backend] = rep.computed / dt
            print(f"{backend:<8} {rep.computed:6d} tasks  {dt:7.2f} s  {rates[backend]:8.1f} tasks/s  "
                  f"({rep.failed} failed)")
    if "process" in rates and "ray" in rates:
        print(f"ray / process tasks/s: {rates['ray'] / rates['process']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
