"""Per-rank tokens against per-rank compute time, for every microbatch: the load skew of a policy.

For each policy, prints its microbatch count, pipeline and DP bubbles and largest microbatch skew, the largest
time ratio between two rank-microbatches whose token counts are within ±10% of each other, and writes a PNG
scatter of (tokens, compute time) per rank-microbatch, one panel per policy. With --per-microbatch it also
prints, per microbatch, the per-rank token and time ranges of stage 0 and their skew.

Examples:
  dcpsim skew                                   # mcore-dcp and hydra on the default scenario → skew.png
  dcpsim skew --policies mcore-dcp -o mcore_skew.png --per-microbatch
"""

from __future__ import annotations

import argparse

from dcpsim.experiments.cli.args import add_scenario_arguments, scenario_from_args

NAME = "skew"
HELP = "print and plot per-rank tokens against compute time per microbatch"
ORDER = 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policies", default="mcore-dcp,hydra", metavar="A,B,...",
                   help="policies to show (default mcore-dcp,hydra)")
    p.add_argument("-o", "--output", default="skew.png", metavar="PNG", help="the scatter plot (default skew.png)")
    p.add_argument("--per-microbatch", action="store_true",
                   help="also print one row per microbatch (stage 0): token and time ranges, skew")
    add_scenario_arguments(p)


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.inspection.skew import policy_skews, write_skew_plot
    from dcpsim.experiments.output.write import Outputs
    from dcpsim.experiments.sweep.keys import named_files

    sc = scenario_from_args(args)
    with Outputs({"-o": args.output}, named_files(sc.to_dict()), images=("-o",)) as outs:  # checked up front
        skews = policy_skews(sc, args.policies)
        _print(args, skews)
        with outs.writing("-o") as tmp:
            write_skew_plot(skews, sc, str(tmp))
    print(f"wrote {args.output}")
    return 0


def _print(args: argparse.Namespace, skews: list) -> None:
    from dcpsim.experiments.output.tables import format_table

    for s in skews:
        m = s.metrics
        print(f"{s.label}: {m.num_microbatches} microbatches, pipeline bubble {m.pipeline_bubble:.1%}, "
              f"DP bubble {m.dp_bubble:.1%}, microbatch skew max {m.microbatch_skew_max:.2f}")
        if s.pair:
            f, w = s.pair["fast"], s.pair["slow"]
            print(f"  largest time ratio at tokens within ±10%: {s.ratio:.2f}x — rank {int(w['rank'])} mb "
                  f"{int(w['microbatch'])}: {w['tokens']:,.0f} tokens {w['compute_s'] * 1e3:.1f} ms vs rank "
                  f"{int(f['rank'])} mb {int(f['microbatch'])}: {f['tokens']:,.0f}"
                  f" tokens {f['compute_s'] * 1e3:.1f} ms")
        if args.per_microbatch:
            rows = [[str(k), f"{x.tokens.min():,.0f}", f"{x.tokens.max():,.0f}", f"{x.compute_s.min() * 1e3:.1f}",
                     f"{x.compute_s.max() * 1e3:.1f}", f"{x.compute_s.max() / max(x.compute_s.min(), 1e-12):.2f}"]
                    for k, x in s.stage0.groupby("microbatch")]
            print(format_table(rows, ["mb", "tokens min", "tokens max", "ms min", "ms max", "skew"]))
