"""HyDra against its own option settings: is the default ever more than 2% slower than the best setting?

    .venv/bin/python -m dcpsim.experiments.studies.hydra_ablation [--scenarios default,h100-512-32k,...] [--seeds 0,1,2]
                                                         [--settings 'profile=False;tolerance=0.1;...']
                                                         [--json]

For every scenario × seed (one iteration, the scenario's first global batch) every setting plans the batch,
the plan is validated against the cost model's memory budget and simulated (``sim.simulate.simulate_plan``).
The table gives each setting's iteration time over the default's (> 1: slower than the default), the default's
efficiency (bound ÷ iteration time) and ``worst``: the default's time over the best setting's. The last line
says whether the default stays within ``--within`` (2%) of the best setting everywhere. A setting that cannot
plan the batch (a PolicyError, e.g. Ulysses alone where heads cap the degree) shows ``infeasible``. Exit status
0 either way (it is a report, not a gate).

Settings (``;``-separated, each a ``key=value:key=value`` option string of ``hydra``): by default every engine,
each degree set (pow2, any; the default auto plans both on small pools), four tolerances, the flat height
profile, one and five microbatch-count candidates and a few fixed microbatch counts.
"""

from __future__ import annotations

import argparse
import json
import sys

DEFAULT_SCENARIOS = ("default", "h100-512-32k", "h100-512-256k", "prod-2048-256k")
DEFAULT_SETTINGS = ("cp_engine=ring", "cp_engine=ulysses", "cp_engine=hybrid", "degrees=pow2", "degrees=any",
                    "tolerance=0.0", "tolerance=0.1", "tolerance=0.2", "profile=False", "m_candidates=1",
                    "m_candidates=5", "num_microbatches=16", "num_microbatches=32", "num_microbatches=64")


def measure(scenario: str, seed: int, settings: list[str]) -> dict:
    """Iteration time and efficiency of the default and every setting on one scenario × seed."""
    from dcpsim.experiments.errors import user_errors
    from dcpsim.experiments.runner import build_policy, parse_policy_specs
    from dcpsim.experiments.scenario.files import load_scenario
    from dcpsim.policies.validate import validate_plan
    from dcpsim.sim.bound import BoundCache
    from dcpsim.sim.simulate import simulate_plan

    sc = load_scenario(scenario).with_(seed=seed, iterations=1)
    cm = sc.cost_model()
    job = cm.job
    batch = sc.batches()[0]
    cache = BoundCache()
    out: dict[str, dict | None] = {}
    labels = ["hydra"] + [f"hydra:{s}" for s in settings]
    for spec in parse_policy_specs(",".join(labels)):
        try:
            plan = build_policy(spec, sc.policy_options).plan(batch, job, cm)
        except user_errors():  # a setting that cannot plan this batch (e.g. Ulysses alone on a 16-rank pool)
            if spec.label == "hydra":
                raise
            out[spec.label] = None
            continue
        validate_plan(plan, batch, max_tokens_per_rank=cm.max_tokens_per_rank(),
                      kv_heads_per_rank=job.kv_heads_per_rank, heads_per_rank=job.heads_per_rank, pool_size=job.pool)
        m = simulate_plan(plan, batch, cm, bound_cache=cache).metrics
        out[spec.label] = {"iteration_time_s": m.iteration_time_s, "efficiency": m.efficiency,
                           "num_microbatches": plan.num_microbatches}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dcpsim.experiments.studies.hydra_ablation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--settings", default=";".join(DEFAULT_SETTINGS))
    ap.add_argument("--within", type=float, default=0.02, help="allowed excess of the default over the best")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from dcpsim.experiments.errors import user_errors

    settings = [s for s in args.settings.split(";") if s]
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print(f"error: --seeds {args.seeds!r}: expected comma-separated integers such as 0,1,2", file=sys.stderr)
        return 2
    rows = []
    try:
        for sc in args.scenarios.split(","):
            for seed in seeds:
                rows.append((sc, seed, measure(sc, seed, settings)))
    except user_errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([{"scenario": sc, "seed": s, "results": r} for sc, s, r in rows], sort_keys=True))
        return 0
    cols = settings
    print("time of each setting / time of the default (hydra); eff = the default's bound / time; "
          "worst = default / best setting")
    print(f"{'scenario':<16}{'seed':>5}{'eff':>7}" + "".join(f"{c:>20}" for c in cols) + f"{'worst':>8}")
    ok = True
    for sc, seed, r in rows:
        t0 = r["hydra"]["iteration_time_s"]
        best = min(v["iteration_time_s"] for v in r.values() if v is not None)
        worst = t0 / best
        ok &= worst <= 1 + args.within
        print(f"{sc:<16}{seed:>5}{r['hydra']['efficiency']:>7.3f}"
              + "".join(f"{r['hydra:' + c]['iteration_time_s'] / t0:>20.3f}" if r["hydra:" + c] is not None
                        else f"{'infeasible':>20}" for c in cols) + f"{worst:>8.3f}")
    print(f"default within {args.within:.0%} of its best setting everywhere: {'yes' if ok else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
