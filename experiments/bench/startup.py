"""Start-up time of the ``dcpsim`` command line, as a ratio to ``python -c "import numpy"``.

    .venv/bin/python experiments/bench/startup.py [--runs 15]

Each command runs ``--runs`` times as a fresh subprocess of this interpreter (``python -m dcpsim ...``,
output discarded); the median wall time counts, and is printed beside its ratio to the median of
``python -c "import numpy"`` measured the same way (numpy is the floor: every command needs it). A ratio
near 1 means the command imports little beyond numpy; eager imports of pandas, matplotlib or scipy show
as ratios of 3 to 6. Ratios, not seconds, are what to compare across machines.

Measured once each on this project's shared 2-core development machine (noisy: other jobs were running; the
lead re-measures when it is quiet), median of 7 runs, before and after issue #10's start-up work (lazy imports
in the command modules and in ``cost_models/__init__``):

=====================  ====================  ====================
command                before (230cf4f)      after (a3c3cb8)
=====================  ====================  ====================
``import numpy``       0.140 s   1.00        0.095 s   1.00
``dcpsim --help``      0.839 s   5.99        0.213 s   2.24
``dcpsim policies``    0.894 s   6.38        0.237 s   2.49
=====================  ====================  ====================

What is left above numpy: the interpreter and argparse, ``importlib.metadata`` for ``dcpsim.__version__``
(about 25 ms), and the policy modules that ``dcpsim policies`` imports to list them. A policy module that
imports scipy or pandas at its top undoes this for ``dcpsim policies``: import them inside ``plan()``
(``tests/experiments/test_startup.py`` checks what these commands import).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

try:  # run by a Python without dcpsim (the system one): one line saying which to use, not a traceback
    import dcpsim  # noqa: F401
except ModuleNotFoundError:
    print(f"{sys.argv[0]}: dcpsim is not installed for {sys.executable}; run it with the venv's Python: "
          f".venv/bin/python {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)

COMMANDS: dict[str, list[str]] = {
    "import numpy": ["-c", "import numpy"],
    "dcpsim --help": ["-m", "dcpsim", "--help"],
    "dcpsim policies": ["-m", "dcpsim", "policies"],
}


def median_seconds(argv: list[str], runs: int) -> float:
    """Median wall time of ``runs`` fresh ``python <argv>`` processes; a failing command is an error."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="subprocess runs per command (median counts)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs must be >= 1, got {args.runs}")
    base = median_seconds(COMMANDS["import numpy"], args.runs)
    print(f"{'command':<18} {'median s':>9} {'x numpy':>8}   (median of {args.runs} runs)")
    for name, cmd in COMMANDS.items():
        t = base if name == "import numpy" else median_seconds(cmd, args.runs)
        print(f"{name:<18} {t:9.3f} {t / base:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
