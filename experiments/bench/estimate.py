"""The times behind experiments/runtime_estimate.py's MEASURED: CPU seconds of one run_policy call per size.

    .venv/bin/python experiments/bench/estimate.py [--policies a,b,...] [--sizes 2000,8000,32000]

Each line: policy, sequences per batch n, CPU seconds of ``run_policy`` (plan, validate, simulate one batch)
on the default scenario (llama3-8b on 64 H200, TP 1, PP 4, pool 16, the ``256k`` preset) with
``global_batch_seqs = n``. Paste the numbers into ``MEASURED`` when a planner's speed changes. A policy that
raises prints its error and the run goes on. FlexSP's MILP took 344 s at n = 8,000: give it small sizes.
"""

from __future__ import annotations

import argparse
import sys
import time

try:  # run by a Python without dcpsim (the system one): one line saying which to use, not a traceback
    import dcpsim  # noqa: F401
except ModuleNotFoundError:
    print(f"{sys.argv[0]}: dcpsim is not installed for {sys.executable}; run it with the venv's Python: "
          f".venv/bin/python {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)

from dcpsim.experiments.runner import parse_policy_specs, run_policy
from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="static-cp,mcore-dcp,mcore-dcp-legacy,hydra,dp-balanced,wlb-llm,distca")
    ap.add_argument("--sizes", default="2000,8000,32000")
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        sc = DEFAULT_SCENARIO.with_(global_batch_seqs=n, iterations=1)
        batches, cost_model = sc.batches(), sc.cost_model()
        for spec in parse_policy_specs(args.policies):
            t0 = time.process_time()
            try:
                run_policy(spec, batches, cost_model, sc.policy_options)
            except Exception as e:  # noqa: BLE001 — one policy's failure is a line, not the end of the run
                print(f"{spec.label:18s} n={n:7d}  failed: {type(e).__name__}: {e}", flush=True)
                continue
            print(f"{spec.label:18s} n={n:7d}  {time.process_time() - t0:8.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
