"""Which conclusions depend on which physics: hydra ÷ mcore-dcp and mcore-dcp ÷ static-cp (iteration-time
ratios, < 1 = the first is faster) on shipped scenarios, with each cost-model term switched off and on.

Variants (``--cost-terms`` texts, cost_models.terms): ``legacy`` (the first model), ``legacy,+T`` for every term
T alone, ``all,-T`` for every term T left out, and ``all``. Each cell is one comparison
(:func:`experiments.runner.compare_policies`, what ``dcpsim compare`` runs) at one iteration, seed 0, so any
cell can be rerun by hand: ``dcpsim compare --json --iterations 1 --seed 0 --cost-terms T --scenario S``.

Run (prints a markdown table; ``--json FILE`` also writes the raw ratios)::

    python -m dcpsim.experiments.studies.sensitivity                        # every shipped scenario (slow: prod-11264)
    python -m dcpsim.experiments.studies.sensitivity --scenario default --scenario h100-512-32k
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dcpsim.cost_models.terms import CostTerms
from dcpsim.experiments.errors import user_errors
from dcpsim.experiments.runner import compare_policies
from dcpsim.experiments.scenario.files import load_scenario, scenario_names


def variants() -> list[str]:
    names = CostTerms.names()
    return ["legacy", *[f"legacy,+{n}" for n in names], *[f"all,-{n}" for n in names], "all"]


def ratios(scenario: str, terms: str) -> dict[str, float]:
    """hydra/mcore-dcp and mcore-dcp/static-cp iteration-time ratios of one comparison (NaN when the scenario
    cannot run with these terms; the reason goes to stderr, as the command's would)."""
    try:
        sc = load_scenario(scenario).with_(iterations=1, seed=0, cost_terms=terms)
        result = compare_policies(sc, "static-cp,mcore-dcp,hydra")
    except user_errors() as e:
        print(f"{scenario} {terms}: error: {e}", file=sys.stderr)
        return {"hydra/mcore": float("nan"), "mcore/static": float("nan")}
    t = {s.policy: s.metrics.iteration_time_s for s in result.summaries}
    return {"hydra/mcore": t["hydra"] / t["mcore-dcp"], "mcore/static": t["mcore-dcp"] / t["static-cp"]}


def shipped_scenarios() -> list[str]:
    return list(scenario_names())


def table(results: dict[str, dict[str, dict[str, float]]], vs: Sequence[str]) -> str:
    scen = list(results)
    head = "| cost terms | " + " | ".join(f"{s}: hydra/mcore | {s}: mcore/static" for s in scen) + " |"
    sep = "|---|" + "---|---|" * len(scen)
    rows = [f"| `{v}` | " + " | ".join(f"{results[s][v]['hydra/mcore']:.3f} | {results[s][v]['mcore/static']:.3f}"
                                       for s in scen) + " |" for v in vs]
    return "\n".join([head, sep, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpsim.experiments.studies.sensitivity",
    description=__doc__.split("\n")[0])
    p.add_argument("--scenario", action="append", help="a shipped scenario name (repeatable; default: all)")
    p.add_argument("--json", metavar="FILE", help="also write the ratios as JSON")
    args = p.parse_args(argv)
    scen = args.scenario or shipped_scenarios()
    vs = variants()
    results: dict[str, dict[str, dict[str, float]]] = {}
    for s in scen:
        results[s] = {}
        for v in vs:
            results[s][v] = ratios(s, v)
            print(f"{s} {v}: {results[s][v]}", file=sys.stderr, flush=True)
    print(table(results, vs))
    if args.json:
        from dcpsim.experiments.output.write import dumps_json, write_text

        write_text(args.json, dumps_json(results, "--json", indent=1, sort_keys=True), "--json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
