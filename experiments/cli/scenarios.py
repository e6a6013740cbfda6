"""List the named scenarios (experiments/scenarios/*.toml and the built-in default)."""

from __future__ import annotations

import argparse

from dcpsim.experiments.scenario.files import load_scenario, scenario_names

NAME = "scenarios"
HELP = "list the named scenarios"
ORDER = 80


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    rows = [(name, load_scenario(name)) for name in scenario_names()]
    wn = max(len(n) for n, _ in rows)
    wg = max(len(sc.gpu) for _, sc in rows)
    wm = max(len(sc.model) for _, sc in rows)
    for name, sc in rows:
        print(f"{name:<{wn}} {sc.num_gpus:>6} x {sc.gpu:<{wg}} {sc.model:<{wm}} ctx {sc.context_len:>7,}  "
              f"{sc.description}")
    return 0
