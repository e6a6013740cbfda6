"""A progress bar on stderr: a thin wrapper over tqdm, drawn only on a terminal.

``Progress(label, total)`` is called with the number of steps done so far (``bar(3)``); it draws nothing when
disabled (``--no-progress``, ``--json``), when there is a single step, or when the stream is not a terminal
(a pipe, a file, a CI log), so redirected output carries no progress noise. tqdm is imported on the first
drawn step, so commands that never draw do not pay for it. ``bar.write(line)`` prints a line (a sweep's
per-point error) above a drawn bar, which tqdm clears and redraws, so the line and the bar never share a row.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


class Progress:
    """Progress of ``total`` steps named ``label``, redrawn in place on ``stream`` (default: stderr)."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.label, self.total = label, total
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.enabled = enabled and total > 1 and self.tty
        self._bar: Any = None

    def __call__(self, done: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=self.label, file=self.stream, leave=True, dynamic_ncols=True,
                             unit="step")
        self._bar.update(done - self._bar.n)
        if done >= self.total:
            self.close()

    def write(self, line: str) -> None:
        """Print ``line`` on the bar's stream on a row of its own: above the bar while it is drawn (tqdm clears
        it, writes the line and redraws it), else as a plain line."""
        if self._bar is not None:
            from tqdm import tqdm

            tqdm.write(line, file=self.stream)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        """End the bar (its last state stays on screen); calling it again, or on a disabled bar, does nothing."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self.enabled = False
