"""How the profiler turns calls into one time: the statistic, the process layout, and combining processes.

A calibration should describe the machine *as a run uses it*. A run of ``W`` processes keeps all of them busy
at once; on a GPU node each has its own GPU, but on a CPU host with fewer cores than processes they share the
cores, and the OS scheduler hands each a time slice in turn. Two choices decide whether a profile sees that:

* **layout** (:data:`LAYOUTS`): ``concurrent`` — every process times the same op at the same time, each
  measurement starting after a barrier, so the contention of a run is inside the measured time; ``alone`` —
  only rank 0 times compute while the others wait in a barrier (the uncontended machine, one process per
  device; what a single-process profile measures);
* **statistic**: with ``window_s > 0`` the *mean* of back-to-back calls until their timed total reaches
  ``window_s`` (at least ``repeats`` calls) — long enough to span several scheduler time slices, so the calls
  that lost the CPU count with their weight; with ``window_s == 0`` the *median* of ``repeats`` calls, which
  discards exactly those calls when a call is shorter than a slice (a call rarely preempted has the
  uncontended time as its median).

In the concurrent layout, the processes' times of each row are averaged (:func:`mean_over_processes`): the
CPU share each process gets over one window varies by tens of percent between processes, while their mean
is what the processes of a run get together.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from dcpsim.real_runtime.timing import Clock

LAYOUTS = ("concurrent", "alone")
"""Process layouts of the compute profile (see module doc)."""


def median_seconds(fn: Callable[[], Any], clock: Clock, repeats: int, warmup: int,
                   setup: Callable[[], Any] | None = None) -> float:
    """Median time of ``fn(setup())`` (or ``fn()``) over ``repeats`` calls after ``warmup`` untimed ones."""
    return _timed_calls(fn, clock, repeats, warmup, 0.0, setup, statistics.median)


def window_mean_seconds(fn: Callable[[], Any], clock: Clock, repeats: int, warmup: int, window_s: float,
                        setup: Callable[[], Any] | None = None) -> float:
    """Mean time of ``fn(setup())`` (or ``fn()``) over back-to-back calls after ``warmup`` untimed ones, until
    the timed calls add up to ``window_s`` seconds and at least ``repeats`` were made (``setup`` is not timed)."""
    return _timed_calls(fn, clock, repeats, warmup, window_s, setup, statistics.fmean)


def _timed_calls(fn: Callable[..., Any], clock: Clock, repeats: int, warmup: int, window_s: float,
                 setup: Callable[[], Any] | None, stat: Callable[[list[float]], float]) -> float:
    for _ in range(warmup):
        fn(setup()) if setup is not None else fn()
    times: list[float] = []
    total = 0.0
    while len(times) < max(1, repeats) or total < window_s:
        arg = setup() if setup is not None else None
        t0 = clock.now()
        fn(arg) if setup is not None else fn()
        dt = clock.now() - t0
        times.append(dt)
        total += dt
    return max(float(stat(times)), 1e-9)


class Timer:
    """Times one op as the settings say: ``sync`` (a barrier of all processes, or None) before each
    measurement, then :func:`window_mean_seconds` (``window_s > 0``) or :func:`median_seconds`."""

    def __init__(self, clock: Clock, repeats: int, warmup: int, window_s: float,
                 sync: Callable[[], Any] | None = None) -> None:
        self.clock, self.repeats, self.warmup, self.window_s, self.sync = clock, repeats, warmup, window_s, sync

    def seconds(self, fn: Callable[..., Any], setup: Callable[[], Any] | None = None) -> float:
        if self.sync is not None:
            self.sync()
        if self.window_s > 0:
            return window_mean_seconds(fn, self.clock, self.repeats, self.warmup, self.window_s, setup)
        return median_seconds(fn, self.clock, self.repeats, self.warmup, setup)


def mean_over_processes(per_process: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The first process's rows with ``seconds`` replaced by the mean over all processes' same rows (every
    process measured the same ops in the same order; a mismatch is an error)."""
    first = list(per_process[0])
    out = []
    for i, row in enumerate(first):
        secs = []
        for rows in per_process:
            other = rows[i]
            if {k: v for k, v in other.items() if k != "seconds"} != {k: v for k, v in row.items() if k != "seconds"}:
                raise ValueError(f"processes profiled different ops at row {i}: {row['op']} vs {other['op']}")
            secs.append(float(other["seconds"]))
        out.append(dict(row, seconds=statistics.fmean(secs)))
    return out


def describe(layout: str, world: int, repeats: int, window_s: float) -> str:
    """The compute layout and statistic in words, for a profile's ``source``."""
    stat = (f"mean of >= {window_s * 1e3:g} ms of calls" if window_s > 0 else f"median of {repeats} calls")
    if layout == "concurrent" and world > 1:
        return f"compute timed concurrently on {world} processes, {stat}, averaged over processes"
    return f"compute timed on 1 process alone, {stat}"
