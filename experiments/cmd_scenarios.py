"""List the named scenarios (experiments/scenarios/*.toml and the built-in default)."""

from __future__ import annotations

import argparse

from dcpsim.experiments.scenario_files import load_scenario, scenario_names

NAME = "scenarios"
HELP = "list the named scenarios"
ORDER = 80


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    for name in scenario_names():
        sc = load_scenario(name)
        print(f"{name:<22} {sc.num_gpus:>6} x {sc.gpu:<5} {sc.model:<11} ctx {sc.context_len:>7,}  {sc.description}")
    return 0
