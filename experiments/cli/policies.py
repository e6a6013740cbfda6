"""List the registered policies and their options: each option's default and what it accepts.

Options are given after a policy's name: ``--policies hydra:tolerance=0.1:num_microbatches=8``.
"""

from __future__ import annotations

import argparse

from dcpsim.policies.registry import available_policies, policy_option_types, policy_options

NAME = "policies"
HELP = "list the registered policies and their options"
ORDER = 90


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    for name in available_policies():
        defaults, types = policy_options(name), policy_option_types(name)
        print(name)
        for key, default in defaults.items():
            print(f"  {key:<36} default {default!r:<8} {types[key].describe()}")
    return 0
