"""Compare several policies on the same global batches.

Every policy receives the same global batches; the table gives each policy's metrics and its throughput ratio
to the first policy. Policy options go after the name: ``--policies mcore-dcp,mcore-dcp:cp_engine=hybrid``.

Examples:
  dcpsim compare                                   # the built-in default scenario
  dcpsim compare --policies static-cp,mcore-dcp --trace my_lengths.csv --iterations 10
  dcpsim compare --json --seed 3
"""

from __future__ import annotations

import argparse
import sys

from dcpsim.experiments.cli.args import add_scenario_arguments, scenario_from_args
from dcpsim.experiments.output.progress import Progress
from dcpsim.experiments.output.write import dumps_json

NAME = "compare"
HELP = "compare policies on the same global batches (default: the built-in scenario)"
ORDER = 10


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policies", metavar="A,B,...",
                   help="comma-separated policies, each 'name' or 'name:key=value:...' "
                        "(default: static-cp,mcore-dcp,hydra); see 'dcpsim policies'")
    add_scenario_arguments(p)


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.output.tables import compare_table
    from dcpsim.experiments.runner import compare_policies

    quiet = args.no_progress or args.json
    result = compare_policies(scenario_from_args(args), args.policies,
                              bars=lambda label, n: Progress(label, n, enabled=not quiet),
                              warn=lambda message: print(message, file=sys.stderr))
    sc = result.scenario
    if args.json:
        results = [(s if args.timings else s.without_timings()).to_dict() for s in result.summaries]
        doc: dict[str, object] = {"scenario": sc.to_dict(), "results": results}
        if result.warnings:  # (only then: outputs that ran as asked stay byte-identical)
            doc |= {"iterations_run": result.batches, "warnings": list(result.warnings)}
        print(dumps_json(doc, "--json", sort_keys=True))
    else:
        print(f"scenario {sc.name}: {sc.model} on {sc.num_gpus} x {sc.gpu} ({sc.layout()}), "
              f"context {sc.context_len:,}, {_batch_size(sc)}, trace {sc.trace}, "
              f"{result.batches} iteration(s), seed {sc.seed}")
        if sc.slow_ranks or sc.stragglers:
            print(f"stragglers: {sc.straggler_spec().describe()} (compute slow-down factors; docs/experiments.md)")
        print(compare_table(result.summaries))
    sys.stdout.flush()
    return 0


def _batch_size(sc) -> str:
    """How the global batches were formed, as the header says it: by sequence count or by the token budget."""
    if sc.global_batch_seqs:
        return f"{sc.global_batch_seqs:,} sequences/batch"
    return f"{sc.global_batch_tokens:,} tokens/batch"
