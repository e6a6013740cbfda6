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


def rows_on_screen(out: str) -> list[str]:
    """What a terminal shows of ``out``: a carriage return goes back to the row's start and overwrites."""
    rows = []
    for line in out.split("\n"):
        row = ""
        for chunk in line.split("\r"):
            row = chunk + row[len(chunk):]
        rows.append(row.rstrip())
    return rows


def test_a_line_written_while_the_bar_is_drawn_gets_a_row_of_its_own():
    tty = Terminal()
    bar = Progress("sweep", 4, stream=tty)
    bar(1)
    bar.write("dcpsim sweep: point 3 hydra: infeasible")
    bar(2)
    rows = rows_on_screen(tty.getvalue())
    assert "dcpsim sweep: point 3 hydra: infeasible" in rows   # the whole row, no bar before or after it
    assert rows.index("dcpsim sweep: point 3 hydra: infeasible") < len(rows) - 1
    assert rows[-1].startswith("sweep:") and "/4" in rows[-1]  # the bar is redrawn below the line
    # the same line printed plainly while the bar is drawn lands on the bar's row (what the fix avoids)
    naive = Terminal()
    plain = Progress("sweep", 4, stream=naive)
    plain(1)
    naive.write("dcpsim sweep: point 3 hydra: infeasible\n")
    assert "dcpsim sweep: point 3 hydra: infeasible" not in rows_on_screen(naive.getvalue())
    off = Terminal()   # no bar drawn (disabled, or finished): a plain line
    Progress("sweep", 4, stream=off, enabled=False).write("a line")
    assert off.getvalue() == "a line\n"


def test_sweep_error_lines_do_not_run_into_the_progress_bar(tmp_path, monkeypatch):
    from tests.experiments.test_sweep import BASE, GRID

    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["sweep", str(tmp_path / "grid.toml"), "-o", str(tmp_path / "out"), "--workers", "1"]) == 0
    rows = rows_on_screen(tty.getvalue())
    errors = [r for r in rows if "dcpsim sweep: point " in r]
    assert len(errors) == 8   # the grid's 8 failing tasks, each on its own row, starting at the row's start
    assert all(r.startswith("dcpsim sweep: point ") and "%|" not in r for r in errors)
    assert any(r.startswith("sweep:") and "16/16" in r for r in rows)   # the bar ran to the end
