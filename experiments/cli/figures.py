"""Produce the study's figures: PNG, PDF and the CSV behind each, into one directory.

Figures (see docs/experiments.md):
  a  throughput per policy against context length (32K-256K), with speedup labels
  b  pipeline and DP bubble per policy, per scenario
  c  per-rank tokens against microbatch time, per policy
  d  scheduling (planning) time against n and W, per policy
  e  one iteration's pipeline timeline (Gantt), per policy
  f  speedup against cluster size (weak scaling)
  g  efficiency (lower bound / iteration time) per policy per scenario, with the literature's schedulers
  h  throughput against straggler severity (one slow rank; random stragglers), per policy

Without --scenario each figure uses its shipped scenarios (experiments/scenarios); with --scenario (repeatable)
every figure uses those, the first as its base. One iteration per point; the policy comparisons (a, b, f, g, h)
run each point on three trace seeds (--quick: two) and draw the mean with the min-max spread. Progress lines
go to stderr.

Examples:
  dcpsim figures -o figs                        # every figure, shipped scenarios (1-2 minutes on 2 cores)
  dcpsim figures --only a,e --quick -o figs     # two figures on smaller grids
  dcpsim figures --scenario my.toml -o figs     # every figure on my scenario
"""

from __future__ import annotations

import argparse
import time

NAME = "figures"
HELP = "write the study's figures (PNG, PDF, CSV) for the shipped or given scenarios"
ORDER = 30


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", default="figures", metavar="DIR", help="output directory (default figures)")
    p.add_argument("--scenario", action="append", metavar="NAME|FILE",
                   help="scenario(s) to use instead of each figure's shipped ones; repeatable")
    p.add_argument("--only", metavar="a,b,...", help="only these figures (letters a-h or file stems)")
    p.add_argument("--quick", action="store_true", help="smaller grids (for a fast look, and the tests)")
    p.add_argument("--policies", metavar="A,B,...",
                   help="policies to show instead of the scenarios' own, e.g. mcore-dcp,hydra")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.figures import make_figures, select
    from dcpsim.experiments.output.write import output_directory
    from dcpsim.experiments.runner import parse_policy_specs
    from dcpsim.experiments.scenario.files import load_scenario

    select(args.only)  # fail early on a bad --only
    scenarios = [load_scenario(s) for s in args.scenario] if args.scenario else None
    policies = [s.label for s in parse_policy_specs(args.policies)] if args.policies else None
    output_directory(args.output, "-o")  # a file in the way or an unwritable place: one line, before any work
    t0 = time.perf_counter()
    files = make_figures(args.output, scenarios, only=args.only, quick=args.quick, policies=policies)
    print(f"wrote {sum(len(v) for v in files.values())} files for figure(s) {', '.join(files)} into "
          f"{args.output} in {time.perf_counter() - t0:.1f} s")
    return 0
