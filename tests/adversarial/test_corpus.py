"""Runs the adversarial corpus (tests/adversarial/corpus.py): every row ends in exactly one line on stderr
naming the problem, exit 2 (or the row's codes), no traceback, no hang, and earlier outputs unchanged."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import adversarial
from tests.adversarial.corpus import ApiCase, Case, lay_out

HANG_LIMIT_S = 120  # far above any row's run (about 2 s); reached only by an input that blocks


def _rows() -> list[Case | ApiCase]:
    rows: list[Case | ApiCase] = []
    for mod in pkgutil.iter_modules(adversarial.__path__):
        if mod.name.startswith("cases_"):
            rows += importlib.import_module(f"tests.adversarial.{mod.name}").CASES
    return rows


ROWS = _rows()
CLI = [r for r in ROWS if isinstance(r, Case)]
API = [r for r in ROWS if isinstance(r, ApiCase)]


def test_the_corpus_is_large_and_names_are_unique() -> None:
    names = [r.name for r in ROWS]
    assert len(names) == len(set(names)), "two rows share a name"
    assert len(CLI) >= 60 and len(API) >= 4


def _run(case: Case, cwd: Path) -> tuple[int, str]:
    if case.subprocess:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        done = subprocess.run([sys.executable, "-m", "dcpsim", *case.argv], cwd=cwd, capture_output=True,
                              text=True, timeout=HANG_LIMIT_S, stdin=subprocess.DEVNULL, env=env)
        return done.returncode, done.stderr
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    from dcpsim.experiments.cli import main

    err, out = StringIO(), StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with redirect_stderr(err), redirect_stdout(out):
            try:
                code = main(list(case.argv))
            except SystemExit as e:   # an option error: argparse prints its one line and exits (2)
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(here)
    return code, err.getvalue()


@pytest.mark.parametrize("case", CLI, ids=[c.name for c in CLI])
def test_cli_row_ends_in_one_line(case: Case, tmp_path: Path) -> None:
    lay_out(tmp_path, case.files)
    for name, data in case.keep.items():
        (tmp_path / name).write_bytes(data)
    code, stderr = _run(case, tmp_path)
    lines = stderr.strip("\n").splitlines()
    assert code in case.codes, f"exit {code}, stderr: {stderr[-2000:]}"
    assert "Traceback" not in stderr
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {stderr[-2000:]}"
    assert lines[0].startswith(f"dcpsim {case.argv[0]}: error: ")
    assert case.expect in lines[0], lines[0]
    for name, data in case.keep.items():
        assert (tmp_path / name).read_bytes() == data, f"{name} was changed by a failed command"


@pytest.mark.parametrize("case", API, ids=[c.name for c in API])
def test_api_row_raises_one_user_error(case: ApiCase) -> None:
    from dcpsim.experiments.errors import user_errors

    with pytest.raises(user_errors()) as info:
        case.call()
    message = str(info.value)
    assert "\n" not in message and case.expect in message, message
