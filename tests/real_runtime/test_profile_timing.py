"""The profiler's statistics and process layouts (real_runtime.profile_timing), no processes spawned."""

import time

import pytest

torch = pytest.importorskip("torch")

from dcpsim.real_runtime.profile_timing import (
    Timer,
    describe,
    mean_over_processes,
    median_seconds,
    window_mean_seconds,
)
from dcpsim.real_runtime.profiler import ProfileSettings
from dcpsim.real_runtime.timing import Clock


class Counter:
    def __init__(self, sleep_s: float = 0.0) -> None:
        self.calls, self.sleep_s = 0, sleep_s

    def __call__(self, *_: object) -> None:
        self.calls += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)


def test_window_mean_calls_until_the_window_is_filled():
    fn = Counter(0.002)
    sec = window_mean_seconds(fn, Clock(), repeats=2, warmup=1, window_s=0.03)
    assert fn.calls >= 1 + 0.03 / 0.004  # warm-up + enough calls to fill the window (sleep may overshoot 2x)
    assert 0.002 <= sec < 0.02
    short = Counter()
    window_mean_seconds(short, Clock(), repeats=5, warmup=2, window_s=0.0)
    assert short.calls == 7  # an empty window still makes `repeats` calls


def test_median_and_setup_are_not_timed():
    fn = Counter()
    setups = []
    sec = median_seconds(fn, Clock(), repeats=3, warmup=1, setup=lambda: setups.append(time.sleep(0.01)))
    assert fn.calls == 4 and len(setups) == 4 and sec < 0.005


def test_timer_syncs_before_each_measurement_and_picks_the_statistic():
    syncs = []
    timer = Timer(Clock(), repeats=2, warmup=0, window_s=0.005, sync=lambda: syncs.append(1))
    fn = Counter(0.001)
    timer.seconds(fn)
    timer.seconds(fn)
    assert len(syncs) == 2 and fn.calls >= 4
    med = Timer(Clock(), repeats=3, warmup=0, window_s=0.0)
    fn2 = Counter()
    med.seconds(fn2)
    assert fn2.calls == 3


def test_mean_over_processes_averages_seconds_of_identical_rows():
    a = [{"op": "gemm", "tokens": 8, "seconds": 1.0}, {"op": "gemm", "tokens": 16, "seconds": 3.0}]
    b = [{"op": "gemm", "tokens": 8, "seconds": 2.0}, {"op": "gemm", "tokens": 16, "seconds": 5.0}]
    assert [r["seconds"] for r in mean_over_processes([a, b])] == [1.5, 4.0]
    with pytest.raises(ValueError, match="different ops"):
        mean_over_processes([a, [dict(b[0], tokens=9), b[1]]])


def test_describe_and_settings_validation():
    assert describe("concurrent", 4, 3, 0.1) == ("compute timed concurrently on 4 processes, mean of >= 100 ms "
                                                  "of calls, averaged over processes")
    assert describe("concurrent", 1, 3, 0.0) == "compute timed on 1 process alone, median of 3 calls"
    assert describe("alone", 4, 3, 0.05).startswith("compute timed on 1 process alone, mean of >= 50 ms")
    with pytest.raises(ValueError, match="layout"):
        ProfileSettings(layout="sideways")
    with pytest.raises(ValueError, match="window_s"):
        ProfileSettings(window_s=-1.0)
    assert ProfileSettings.quick().window_s > 0 and ProfileSettings().layout == "concurrent"
