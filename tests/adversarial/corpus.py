"""The adversarial input corpus: a table of bad inputs, each expected to end in one line on stderr and exit 2
(or 1), never a traceback, a hang or a destroyed output.

A :class:`Case` is one row: the files it lays out in a fresh directory (bytes, text, a FIFO, a directory or
a writer function), the ``dcpsim`` command line run there, and a fragment the one error line must contain.
CLI cases run in-process (``experiments.cli.main``); a case with ``subprocess=True`` runs ``python -m dcpsim``
under a time limit instead, for inputs that could block (FIFOs). An :class:`ApiCase` calls a function that
must raise one of the project's user errors (``experiments.errors.user_errors()``) with a one-line message:
the plan classes, which no command reads from a file.

To add a class (cost-model, GPU, calibration, scenario, sweep, output paths), add a ``cases_<class>.py``
module beside this one defining ``CASES``: tests/adversarial/test_corpus.py collects every such module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

FIFO = object()  # a named pipe: reading it would block forever
DIRECTORY = object()  # a directory where a file is expected

Content = Union[bytes, str, object, Callable[[Path], Any]]


@dataclass(frozen=True)
class Case:
    """One command line against files laid out in a fresh directory (the working directory of the run)."""

    name: str
    argv: tuple[str, ...]
    expect: str  # a fragment of the one stderr line (case-sensitive)
    files: dict[str, Content] = field(default_factory=dict)
    keep: dict[str, bytes] = field(default_factory=dict)  # earlier outputs that must survive unchanged
    codes: tuple[int, ...] = (2,)
    subprocess: bool = False  # run 'python -m dcpsim' with a time limit (inputs that could block)


@dataclass(frozen=True)
class ApiCase:
    """A function that must raise a user error whose message contains ``expect`` and is one line."""

    name: str
    call: Callable[[], Any]
    expect: str


def lay_out(root: Path, files: dict[str, Content]) -> None:
    import os

    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is FIFO:
            os.mkfifo(path)
        elif content is DIRECTORY:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        elif callable(content):
            content(path)
        else:  # pragma: no cover - a malformed table row
            raise TypeError(f"{name}: unknown content {content!r}")
