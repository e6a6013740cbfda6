"""The ``dcpsim`` command line.

Every sub-command is a module ``experiments/cmd_<name>.py`` defining ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; they are discovered here, so adding a command is one new
module. Errors a user can cause (bad trace, unknown preset, impossible job, a malformed flag value, ...) print
one line and exit 2.

Start-up stays light: building the parser imports every command module, so a command module imports only
argparse-level things at the top and its heavy dependencies (pandas, scipy, simpy, matplotlib, torch) inside
``run()``; ``experiments/bench_startup.py`` measures it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from dcpsim import experiments
from dcpsim.experiments.errors import user_errors


def _commands():
    mods = []
    for m in pkgutil.iter_modules(experiments.__path__):
        if m.name.startswith("cmd_"):
            mods.append(importlib.import_module(f"dcpsim.experiments.{m.name}"))
    return sorted(mods, key=lambda mod: getattr(mod, "ORDER", 50))


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors (unknown flag, a value its type rejects) are one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="dcpsim",
        description="Simulate dynamic context parallelism (DCP) policies for long-context LLM training.",
        epilog="Run 'dcpsim COMMAND --help' for the options of a command. With no options, simulate and "
               "compare run the built-in default scenario.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=(mod.__doc__ or mod.HELP).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except user_errors() as e:
        print(f"dcpsim {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dcpsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away ('dcpsim policies | head'): stop quietly, as Python advises
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
