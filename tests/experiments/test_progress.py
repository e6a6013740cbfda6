"""The progress bar: drawn (and redrawn in place) only on a terminal, silent otherwise and when disabled."""

import io

from dcpsim.experiments.cli import main
from dcpsim.experiments.output.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_draws_and_redraws_on_a_terminal():
    tty = Terminal()
    bar = Progress("hydra", 3, stream=tty)
    for done in (1, 2, 3):
        bar(done)
    out = tty.getvalue()
    # drawn at the first step, then redrawn in place (carriage return, same line) at the end: tqdm skips the
    # redraws in between that come faster than its refresh interval
    first, last = out.split("\r")[1:][0], out.split("\r")[-1]
    assert out.startswith("\r") and "hydra" in first and "0/3" in first and "hydra" in last and "3/3" in last
    assert out.endswith("\n")  # closed when done, so the next output starts on a fresh line


def test_silent_off_a_terminal_disabled_or_single_step():
    for stream, total, enabled in ((io.StringIO(), 3, True), (Terminal(), 3, False), (Terminal(), 1, True)):
        bar = Progress("x", total, stream=stream, enabled=enabled)
        for done in range(1, total + 1):
            bar(done)
        assert stream.getvalue() == "", (type(stream).__name__, total, enabled)


def test_json_output_has_no_progress_even_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr("sys.stderr", Terminal())
    args = ["compare", "--policies", "static-cp", "--global-batch-tokens", "1048576", "--iterations", "2"]
    assert main([*args, "--json"]) == 0
    import sys
    assert sys.stderr.getvalue() == ""
    assert main(args) == 0  # the same run as a table draws the bar on the terminal
    assert "static-cp" in sys.stderr.getvalue() and "2/2" in sys.stderr.getvalue()
