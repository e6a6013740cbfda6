"""Simulate one policy on a scenario and print its metrics.

Examples:
  dcpsim simulate                                   # hydra on the built-in default scenario
  dcpsim simulate --policy mcore-dcp --trace lengths.csv --iterations 5
  dcpsim simulate --policy static-cp:cp_degree=8 --timeline-out tl.csv --plan-out plan.json
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dcpsim.experiments.cli.args import add_scenario_arguments, scenario_from_args
from dcpsim.experiments.output.progress import Progress

NAME = "simulate"
HELP = "simulate one policy (default: hydra on the built-in scenario)"
ORDER = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default="hydra", metavar="NAME[:k=v...]", help="the policy (default hydra)")
    add_scenario_arguments(p)
    o = p.add_argument_group("files")
    o.add_argument("--plan-out", metavar="FILE", help="write the last iteration's plan as JSON")
    o.add_argument("--timeline-out", metavar="FILE", help="write the last iteration's timeline (.csv or .parquet)")
    o.add_argument("--chrome-trace", metavar="FILE",
                   help="write the last iteration's timeline as a Chrome trace (JSON for Perfetto / chrome://tracing)")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.output.iteration_files import CHROME, PLAN, TIMELINE, write_iteration_files
    from dcpsim.experiments.output.write import Outputs, dumps_json
    from dcpsim.experiments.runner import memory_warning, simulate_policy
    from dcpsim.experiments.sweep.keys import named_files

    quiet = args.no_progress or args.json
    scenario = scenario_from_args(args)
    # every output is checked before any work, and all of them land together or none does
    with Outputs({PLAN: args.plan_out, TIMELINE: args.timeline_out, CHROME: args.chrome_trace},
                 inputs=named_files(scenario.to_dict())) as outs:
        sc, pr = simulate_policy(scenario, args.policy,
                                 bars=lambda label, n: Progress(label, n, enabled=not quiet),
                                 warn=lambda message: print(message, file=sys.stderr, flush=True))
        label = pr.spec.label
        summary = pr.summary(timings=True)
        warn = memory_warning(summary)
        if warn:
            print(warn, file=sys.stderr)
        write_iteration_files(pr.iterations[-1], label, outs,
                              metadata={"scenario": sc.to_dict(), "policy": label, "metrics": summary.to_dict()})
        document = None
        if args.json:
            result = (summary if args.timings else summary.without_timings()).to_dict()
            document = dumps_json({"scenario": sc.to_dict(), "results": [result]}, "--json", sort_keys=True)
    if document is not None:
        print(document)
        return 0
    _print_table(sc, pr, label, summary)
    return 0


def _print_table(sc: Any, pr: Any, label: str, summary: Any) -> None:
    from dcpsim.experiments.output.tables import format_table
    from dcpsim.sim.metric_spec import declarations

    print(f"scenario {sc.name}: {sc.model} on {sc.num_gpus} x {sc.gpu} ({sc.layout()}), "
          f"context {sc.context_len:,}, trace {sc.trace}, {len(pr.iterations)} iteration(s), policy {label}")
    rows = [[d.name, _value(getattr(summary.metrics, d.name)), d.unit] for d in declarations(type(summary.metrics))]
    rows.append(["fits_memory", str(summary.fits_memory), ""])
    print(format_table(rows, ["metric", "value", "unit"]))


def _value(v: float) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
