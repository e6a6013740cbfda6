"""The ``dcpsim`` command line.

Every sub-command is one module of this package, ``experiments/cli/<name>.py``, defining ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int`` (and optionally ``ORDER``, its place in ``--help``); the
modules are discovered here, so **adding a command is one new module in experiments/cli/** (a module without
``NAME``, such as ``args``, the flags several commands share, is not a command). A command module parses its
arguments, calls one library function (in experiments/, real_runtime/, cost_models/ ...) and prints what it
returns; the work itself lives in the library, where tests call it directly.

Errors a user can cause (bad trace, unknown preset, impossible job, a malformed flag value, ...) print
one line and exit 2.

Start-up stays light: building the parser imports every command module, so a command module imports only
argparse-level things at the top and its heavy dependencies (pandas, scipy, simpy, matplotlib, torch) inside
``run()``; ``experiments/bench/startup.py`` measures it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from dcpsim.experiments.errors import user_errors


def _commands():
    """Every command module of this package (those defining ``NAME``), in ``ORDER``."""
    mods = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
    return sorted((mod for mod in mods if hasattr(mod, "NAME")), key=lambda mod: getattr(mod, "ORDER", 50))


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
