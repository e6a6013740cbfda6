"""Benchmark: replay 1,000 DistCA iterations (the shipped 64k baseline file's 100 iterations, ten times) through
``dcpsim replay``'s path (import, checks, one simulate_plan per iteration). Prints seconds; the acceptance is
≤ 10 s on one core.

  python experiments/bench/replay.py [--iterations N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

try:  # run by a Python without dcpsim (the system one): one line saying which to use, not a traceback
    import dcpsim  # noqa: F401
except ModuleNotFoundError:
    print(f"{sys.argv[0]}: dcpsim is not installed for {sys.executable}; run it with the venv's Python: "
          f".venv/bin/python {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)

from dcpsim.experiments.replay.distca import import_distca
from dcpsim.experiments.replay.replay import check_log, cost_model_of, replay_with

FILE = (Path(__file__).resolve().parents[2] / "cost_models" / "data" / "measured" / "distca"
        / "64k_benchmark.20250813_015721.baseline.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=1000)
    n = ap.parse_args().iterations
    t0 = time.perf_counter()
    log = import_distca(FILE)
    its = (log.iterations * (n // len(log.iterations) + 1))[:n]
    log = log.with_iterations(its)
    cm = cost_model_of(log)
    check_log(log, cm)
    rows = replay_with(log, cm)
    dt = time.perf_counter() - t0
    print(f"replayed {len(rows)} DistCA iterations in {dt:.2f} s ({dt / len(rows) * 1e3:.2f} ms each)")


if __name__ == "__main__":
    main()
