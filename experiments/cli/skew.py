"""Per-rank tokens against per-rank compute time, for every microbatch: the load skew of a policy.

For each policy, prints each microbatch's per-rank token and time ranges (stage 0), the largest time ratio
between two rank-microbatches whose token counts are within ±10% of each other, and writes a PNG scatter of
(tokens, compute time) per rank-microbatch, one panel per policy.

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
    p.add_argument("--per-microbatch", action="store_true", help="print one row per microbatch")
    add_scenario_arguments(p)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from dcpsim.experiments.output.tables import format_table
    from dcpsim.experiments.runner import parse_policy_specs, run_policy
    from dcpsim.sim.metrics import equal_tokens_time_ratio, rank_microbatch_table

    sc = scenario_from_args(args)
    cost_model = sc.cost_model()
    batches = sc.batches()[:1]
    frames = []
    for spec in parse_policy_specs(args.policies):
        pr = run_policy(spec, batches, cost_model, sc.policy_options)
        res = pr.iterations[0]
        t = rank_microbatch_table(res.timeline)
        frames.append(t[t["stage"] == 0].assign(policy=spec.label))
        ratio, pair = equal_tokens_time_ratio(t)
        m = res.metrics
        print(f"{spec.label}: {m.num_microbatches} microbatches, pipeline bubble {m.pipeline_bubble:.1%}, "
              f"DP bubble {m.dp_bubble:.1%}, microbatch skew max {m.microbatch_skew_max:.2f}")
        if pair:
            f, s = pair["fast"], pair["slow"]
            print(f"  largest time ratio at tokens within ±10%: {ratio:.2f}x — rank {int(s['rank'])} mb "
                  f"{int(s['microbatch'])}: {s['tokens']:,.0f} tokens {s['compute_s'] * 1e3:.1f} ms vs rank "
                  f"{int(f['rank'])} mb {int(f['microbatch'])}: {f['tokens']:,.0f} tokens {f['compute_s'] * 1e3:.1f} ms")
        if args.per_microbatch:
            t0 = t[t["stage"] == 0]
            g = t0.groupby("microbatch")
            rows = [[str(k), f"{x.tokens.min():,.0f}", f"{x.tokens.max():,.0f}", f"{x.compute_s.min() * 1e3:.1f}",
                     f"{x.compute_s.max() * 1e3:.1f}", f"{x.compute_s.max() / max(x.compute_s.min(), 1e-12):.2f}"]
                    for k, x in g]
            print(format_table(rows, ["mb", "tokens min", "tokens max", "ms min", "ms max", "skew"]))
    from dcpsim.experiments.figures.skew import plot

    fig = plot(pd.concat(frames, ignore_index=True), sc)
    fig.savefig(args.output, dpi=130)
    print(f"wrote {args.output}")
    return 0
