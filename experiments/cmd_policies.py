"""List the registered policies and their options."""

from __future__ import annotations

import argparse

from dcpsim.policies.registry import available_policies, policy_options

NAME = "policies"
HELP = "list the registered policies and their options"
ORDER = 90


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    for name in available_policies():
        opts = ", ".join(f"{k}={v!r}" for k, v in policy_options(name).items())
        print(f"{name:<20} {opts}")
    return 0
