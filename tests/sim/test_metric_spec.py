"""Metric declarations (sim.metric_spec) and the one per-rank-microbatch aggregation (sim.metrics)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from dcpsim.sim.metric_spec import (
    MAX,
    MEAN,
    Column,
    Over,
    aggregate,
    declarations,
    metric,
    ratio,
    without_wall_clock,
)
from dcpsim.sim.metrics import METRIC_NAMES, METRICS, Metrics, rank_microbatch_sums, rank_microbatch_table
from dcpsim.sim.timeline import Timeline


def metrics(**values) -> Metrics:
    """A Metrics with every field 0 except ``values``."""
    return Metrics(**(dict.fromkeys(METRIC_NAMES, 0.0) | {"tokens": 0} | values))


def test_every_field_is_declared_in_field_order():
    assert METRIC_NAMES == tuple(f.name for f in dataclasses.fields(Metrics))
    assert all(d.unit and isinstance(d.over, Over) for d in METRICS)
    assert [d.name for d in METRICS if d.wall_clock] == ["scheduling_time_s"]


def test_aggregation_over_iterations_by_hand():
    a = metrics(iteration_time_s=2.0, tokens=100, mfu=0.25, pipeline_bubble=0.1, pipeline_bubble_max=0.5,
                microbatch_skew_max=3.0, num_microbatches=4, peak_memory_gib=80.0, scheduling_time_s=0.01)
    b = metrics(iteration_time_s=3.0, tokens=200, mfu=0.75, pipeline_bubble=0.3, pipeline_bubble_max=0.2,
                microbatch_skew_max=1.5, num_microbatches=6, peak_memory_gib=90.0, scheduling_time_s=0.03)
    run = aggregate([a, b], num_gpus=4)
    assert type(run) is Metrics
    assert run.iteration_time_s == 2.5  # mean
    assert run.tokens == 300 and isinstance(run.tokens, int)  # sum
    assert run.tokens_per_s == 60.0  # Σ tokens / Σ time = 300 / 5, not the mean of 50 and 66.7
    assert run.tokens_per_s_per_gpu == 15.0  # ... over 4 GPUs
    assert run.mfu == 0.5 and run.pipeline_bubble == pytest.approx(0.2)
    assert run.pipeline_bubble_max == 0.5 and run.microbatch_skew_max == 3.0 and run.peak_memory_gib == 90.0
    assert run.num_microbatches == 5.0 and run.scheduling_time_s == pytest.approx(0.02)
    assert aggregate([a], num_gpus=4) == dataclasses.replace(a, tokens_per_s=50.0, tokens_per_s_per_gpu=12.5,
                                                             num_microbatches=4.0)
    assert without_wall_clock(run) == dataclasses.replace(run, scheduling_time_s=0.0)
    with pytest.raises(ValueError, match="no iterations"):
        aggregate([], num_gpus=4)


def test_a_metric_added_to_a_subclass_is_aggregated_as_declared():
    @dataclass(frozen=True)
    class WithOracle(Metrics):  # Metrics now ends with bound_s / efficiency (defaults), so: other names
        lower_s: float = metric("s", MEAN, default=0.0)
        closeness: float = metric("fraction", ratio("lower_s", "iteration_time_s"), default=0.0)

    base = metrics(iteration_time_s=2.0).to_dict()
    a = WithOracle(**base | {"iteration_time_s": 2.0}, lower_s=1.0, closeness=0.5)
    b = WithOracle(**base | {"iteration_time_s": 8.0}, lower_s=6.0, closeness=0.75)
    run = aggregate([a, b], num_gpus=1)
    assert [d.name for d in declarations(WithOracle)][-2:] == ["lower_s", "closeness"]
    assert run.lower_s == 3.5 and run.closeness == 0.7  # Σ bound / Σ time = 7 / 10, not mean(0.5, 0.75)


def test_declaration_mistakes_are_caught():
    @dataclass(frozen=True)
    class Undeclared:
        x: float

    with pytest.raises(TypeError, match=r"Undeclared\.x is not declared"):
        declarations(Undeclared)

    @dataclass(frozen=True)
    class BadRatio:
        y: float = metric("s", ratio("nope", "y"))

    with pytest.raises(TypeError, match="names 'nope', which is not a field"):
        declarations(BadRatio)
    with pytest.raises(ValueError, match="'median' is not one of mean, max, min, sum, ratio"):
        Over("median")
    with pytest.raises(ValueError, match="only it"):
        Over("mean", "tokens", "iteration_time_s")
    assert Over("ratio", "a", "b").reduce([], "x", 1) == 0.0  # nothing over nothing: 0.0, no ZeroDivisionError
    assert MAX.describe() == "max" and ratio("tokens", "iteration_time_s", per_gpu=True).describe() == \
        "Σ tokens / Σ iteration_time_s / GPUs"


def test_column_cells():
    assert Column("MFU", "{:.1%}").cell(0.3131, 1.0) == "31.3%"
    assert Column("sched ms", "{:.1f}", scale=1e3).cell(0.01463, 1.0) == "14.6"
    assert Column("x first", "{:.2f}x", relative=True).cell(3.0, 2.0) == "1.50x"
    assert Column("tok/s/GPU", "{:,.0f}").cell(3039.17, 1.0) == "3,039"
    assert Column("x first", "{:.2f}x", relative=True).cell(3.0, 0.0) == "nanx"


def _timeline(rows, stages=2, pool=2) -> Timeline:
    names = ("stage", "rank", "microbatch", "phase", "kind", "comm", "start", "end", "tokens")
    cols = {n: np.array([r[i] for r in rows]) for i, n in enumerate(names)}
    for n in ("stage", "rank", "microbatch"):
        cols[n] = cols[n].astype(np.int32)
    for n in ("start", "end", "tokens"):
        cols[n] = cols[n].astype(np.float64)
    return Timeline(cols, stages, pool)


def test_rank_microbatch_sums_by_hand():
    # stage 1 rank 0 mb 0 measured in two compute pieces (F) plus B and a CP tail; a PP wait is not compute;
    # stage 0 rank 1 mb 2; sync rows (microbatch −1) are not microbatches.
    tl = _timeline([
        (1, 0, 0, "F", "comm", "pp", 0.0, 0.5, 8),
        (1, 0, 0, "F", "compute", "", 0.5, 1.5, 8), (1, 0, 0, "F", "compute", "", 1.5, 2.0, 8),
        (1, 0, 0, "F", "comm", "cp", 2.0, 2.25, 8), (1, 0, 0, "B", "compute", "", 3.0, 6.0, 8),
        (0, 1, 2, "F", "compute", "", 0.0, 1.0, 4), (0, 1, 2, "B", "compute", "", 1.0, 3.0, 4),
        (0, 1, -1, "S", "comm", "dp", 6.0, 7.0, 0), (1, 0, -1, "S", "idle", "", 6.0, 6.5, 0),
    ])
    t = rank_microbatch_sums(tl)
    assert t[["stage", "rank", "microbatch"]].values.tolist() == [[0, 1, 2], [1, 0, 0]]  # sorted by the key
    assert t.tokens.tolist() == [4.0, 8.0]
    assert t.compute_s.tolist() == [3.0, 1.0 + 0.5 + 3.0] and t.cp_s.tolist() == [0.0, 0.25]
    assert list(rank_microbatch_table(tl).columns) == ["stage", "rank", "microbatch", "tokens", "compute_s"]
    empty = rank_microbatch_sums(_timeline([(0, 0, -1, "S", "comm", "dp", 0.0, 1.0, 0)]))
    assert len(empty) == 0 and list(empty.columns) == list(t.columns)
