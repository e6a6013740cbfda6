"""Simulator speed: seconds per simulated iteration and engine events per second, at 512 to 11,264 GPUs.

    .venv/bin/python experiments/bench/sim.py [--scenarios h100-512-256k,prod-2048-256k,prod-11264-256k]
                                              [--policies static-cp,mcore-dcp,hydra] [--repeats 3]
                                              [--profile SCENARIO:POLICY]

For every shipped scenario and policy: the first global batch is planned once (``plan s``, the policy's
wall time, not the simulator's), then simulated ``--repeats`` times; the best time counts:

* ``sim s``: :func:`sim.simulate.simulate_plan`, everything the simulator does for one iteration
  (flatten the plan, price every operation with the cost model, run the simpy engine, build the timeline,
  compute the metrics);
* ``engine s``: :func:`sim.engine.execute` alone (costs + dependency graph + simpy run);
* ``events``: the engine's simpy events (operations plus delayed transfers); ``ev/s`` = events / engine s;
* ``iter s``: the simulated iteration time (what the simulator predicts, for scale).

One process, one core (``time.perf_counter``). ``--profile S:P`` prints the top of a cProfile of one
``simulate_plan`` call, to see where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from typing import TypeVar

try:  # run by a Python without dcpsim (the system one): one line saying which to use, not a traceback
    import dcpsim  # noqa: F401
except ModuleNotFoundError:
    print(f"{sys.argv[0]}: dcpsim is not installed for {sys.executable}; run it with the venv's Python: "
          f".venv/bin/python {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)

from dcpsim.experiments.runner import PolicySpec, build_policy
from dcpsim.experiments.scenario.files import load_scenario
from dcpsim.policies.flatten import flatten
from dcpsim.policies.registry import available_policies
from dcpsim.sim.engine import execute
from dcpsim.sim.simulate import simulate_plan

DEFAULT_SCENARIOS = ("h100-512-256k", "prod-2048-256k", "prod-11264-256k")
DEFAULT_POLICIES = ("static-cp", "mcore-dcp", "hydra")


T = TypeVar("T")


def best_of(fn: Callable[[], T], repeats: int) -> tuple[float, T]:
    """Best wall time of ``repeats`` (at least one) calls of ``fn()`` and the last result."""
    best = float("inf")
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_one(scenario: str, policy: str, repeats: int) -> dict:
    """Plan, then time the simulation of, the first global batch of ``scenario`` under ``policy``."""
    sc = load_scenario(scenario).with_(iterations=1)
    batch = sc.batches()[0]
    cm, job = sc.cost_model(), sc.job()
    t0 = time.perf_counter()
    plan = build_policy(PolicySpec(policy), sc.policy_options).plan(batch, job, cm)
    plan_s = time.perf_counter() - t0
    sim_s, res = best_of(lambda: simulate_plan(plan, batch, cm), repeats)
    fp = flatten(plan, batch)
    eng_s, ot = best_of(lambda: execute(fp, cm, job.pp), repeats)
    return {"scenario": scenario, "gpus": sc.num_gpus, "policy": policy, "seqs": len(batch.lengths),
            "mbs": plan.num_microbatches, "groups": fp.num_groups, "ops": 2 * job.pp * fp.num_groups,
            "rows": len(res.timeline), "events": ot.events, "plan_s": plan_s, "sim_s": sim_s, "engine_s": eng_s,
            "ev_per_s": ot.events / eng_s if eng_s > 0 else float("inf"),
            "iteration_s": res.metrics.iteration_time_s}


def format_rows(rows: list[dict]) -> str:
    header = ["scenario", "GPUs", "policy", "seqs", "mbs", "groups", "events", "plan s", "sim s", "engine s",
              "ev/s", "iter s"]
    table = [[r["scenario"], f"{r['gpus']:,}", r["policy"], f"{r['seqs']:,}", str(r["mbs"]), f"{r['groups']:,}",
              f"{r['events']:,}", f"{r['plan_s']:.2f}", f"{r['sim_s']:.2f}", f"{r['engine_s']:.2f}",
              f"{r['ev_per_s']:,.0f}", f"{r['iteration_s']:.2f}"] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) if i in (0, 2) else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for t in table:
        lines.append("  ".join(x.ljust(w) if i in (0, 2) else x.rjust(w) for i, (x, w) in enumerate(zip(t, widths))))
    return "\n".join(lines)


def profile(target: str, top: int = 25) -> str:
    """cProfile of one ``simulate_plan`` call of ``SCENARIO:POLICY``; the top functions by cumulative time."""
    scenario, _, policy = target.partition(":")
    sc = load_scenario(scenario).with_(iterations=1)
    batch, cm, job = sc.batches()[0], sc.cost_model(), sc.job()
    plan = build_policy(PolicySpec(policy or "mcore-dcp"), sc.policy_options).plan(batch, job, cm)
    prof = cProfile.Profile()
    prof.enable()
    simulate_plan(plan, batch, cm)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS), help="comma-separated (default %(default)s)")
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                    help="comma-separated; unregistered ones are skipped (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=3, help="simulations per cell; the best counts (default 3)")
    ap.add_argument("--profile", metavar="SCENARIO:POLICY", help="print a cProfile of one simulation instead")
    args = ap.parse_args(argv)
    if args.profile:
        print(profile(args.profile))
        return 0
    known = set(available_policies())
    policies = [p for p in args.policies.split(",") if p.strip()]
    skipped = [p for p in policies if p not in known]
    if skipped:
        print(f"skipping unregistered policies: {', '.join(skipped)}", file=sys.stderr)
    rows = []
    for scenario in [s for s in args.scenarios.split(",") if s.strip()]:
        for pol in [p for p in policies if p in known]:
            r = bench_one(scenario, pol, args.repeats)
            print(f"  {scenario} {pol}: plan {r['plan_s']:.2f} s, simulate {r['sim_s']:.2f} s", file=sys.stderr,
                  flush=True)
            rows.append(r)
    print(f"one iteration per cell, best of {args.repeats} simulations, one core; 'iter s' is the simulated "
          "iteration time")
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
