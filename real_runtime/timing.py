"""Measuring a run: a clock that waits for the device, and the time spent blocked in CP communication.

Clock
-----
:class:`Clock` reads ``time.perf_counter`` after synchronising the device (CUDA kernels run asynchronously;
on CPUs synchronisation is a no-op), relative to an origin the runner resets at the start of every iteration,
right after a barrier, so that the times of all processes share one zero.

Exposed CP communication
------------------------
The simulator charges a CP group's *exposed* communication separately from its compute: Ulysses all-to-alls
entirely, ring transfers only where they outlast the block computed meanwhile. The runner measures the same
thing as the time a rank spends blocked in communication: inside ``all_to_all_single`` and inside ``wait()``
on the requests of ``batch_isend_irecv`` (the ring's send/recv pair, started before the block's compute and
waited for after it). :class:`CommTimer` wraps exactly these two ``torch.distributed`` functions while it is
active (the engines call them through the ``torch.distributed`` module, so nothing in the engines changes),
and restores them on exit. On CUDA each timed call synchronises the device before (so that the compute queued
earlier is not counted) and after (so that the transfer is), which measures the exposed part of a ring
transfer at the cost of a few host round trips. The runner's own gradient all-reduce is not wrapped; it is
timed directly.
"""

from __future__ import annotations

import time
from typing import Any, final

import torch
import torch.distributed as dist


class Clock:
    """Seconds since :meth:`reset`, read after the device has finished queued work."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.origin = time.perf_counter()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def reset(self) -> None:
        self.sync()
        self.origin = time.perf_counter()

    def now(self) -> float:
        self.sync()
        return time.perf_counter() - self.origin


class _TimedWork:
    """A request of ``batch_isend_irecv`` whose ``wait()`` is timed."""

    def __init__(self, work: Any, timer: CommTimer) -> None:
        self._work = work
        self._timer = timer

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        t0 = self._timer.enter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            self._timer.leave(t0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


@final
class CommTimer:
    """Context manager accumulating the seconds spent blocked in CP communication (see module doc).

    ``seconds`` grows monotonically; read it before and after a phase and subtract.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.seconds = 0.0
        self._saved: dict[str, Any] = {}

    def enter(self) -> float:
        self.clock.sync()
        return time.perf_counter()

    def leave(self, t0: float) -> None:
        self.clock.sync()
        self.seconds += time.perf_counter() - t0

    def __enter__(self) -> CommTimer:
        a2a, batch = dist.all_to_all_single, dist.batch_isend_irecv
        self._saved = {"all_to_all_single": a2a, "batch_isend_irecv": batch}

        def all_to_all_single(*args: Any, **kwargs: Any) -> Any:
            t0 = self.enter()
            try:
                return a2a(*args, **kwargs)
            finally:
                self.leave(t0)

        def batch_isend_irecv(*args: Any, **kwargs: Any) -> Any:
            t0 = self.enter()
            try:
                works = batch(*args, **kwargs)
            finally:
                self.leave(t0)
            return [_TimedWork(w, self) for w in works]

        dist.all_to_all_single = all_to_all_single
        dist.batch_isend_irecv = batch_isend_irecv
        return self

    def __exit__(self, *exc: object) -> None:
        for name, fn in self._saved.items():
            setattr(dist, name, fn)
        self._saved = {}
