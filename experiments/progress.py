"""A minimal progress bar on stderr (redrawn in place on a terminal, one line per step elsewhere)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.label, self.total = label, total
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 1
        self.t0 = time.perf_counter()
        self.tty = hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, done: int) -> None:
        if not self.enabled:
            return
        width = 24
        fill = int(width * done / self.total)
        el = time.perf_counter() - self.t0
        eta = el / done * (self.total - done) if done else 0.0
        line = f"{self.label:<14} [{'#' * fill}{'.' * (width - fill)}] {done}/{self.total}  {el:5.1f}s  eta {eta:4.1f}s"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
