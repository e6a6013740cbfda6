"""Comparing predicted and measured timelines (real_runtime.compare): closed-form cases, no processes."""

import math

import pytest

torch = pytest.importorskip("torch")  # the rule of tests/real_runtime (compare itself needs no torch)

import pandas as pd

from real_runtime.compare import (
    ape,
    compare_iteration,
    mape,
    rank_microbatch_times,
    ranking,
    same_ranking,
    summarise,
)


def timeline(rows):
    cols = ["stage", "rank", "microbatch", "phase", "kind", "comm", "start", "end", "tokens"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows])


def two_rank_timeline(scale: float, comm: float):
    """Microbatch 0 on ranks 0, 1 (a CP group); microbatch 1 on rank 0 only; then the sync."""
    s = scale
    return timeline([
        (0, 0, 0, "F", "compute", "", 0, 1 * s, 10), (0, 0, 0, "F", "comm", "cp", 1 * s, 1 * s + comm, 10),
        (0, 0, 0, "B", "compute", "", 2, 2 + 2 * s, 10),
        (0, 1, 0, "F", "compute", "", 0, 1.5 * s, 10), (0, 1, 0, "B", "compute", "", 2, 2 + 2 * s, 10),
        (0, 0, 1, "F", "compute", "", 5, 5 + s, 4), (0, 0, 1, "B", "compute", "", 6, 6 + 2 * s, 4),
        (0, 0, -1, "S", "comm", "dp", 9, 10, 0), (0, 1, -1, "S", "idle", "", 4, 9, 0),
    ])


def test_rank_microbatch_times_sum_phases_and_split_comm():
    t = rank_microbatch_times(two_rank_timeline(1.0, 0.25))
    row = t[(t["rank"] == 0) & (t.microbatch == 0)].iloc[0]
    assert row.compute_s == pytest.approx(3.0) and row.cp_s == pytest.approx(0.25) and row.tokens == 10
    assert len(t) == 3  # sync rows are not microbatches


def test_errors_of_a_uniformly_slower_measurement():
    pred, meas = two_rank_timeline(1.0, 0.0), two_rank_timeline(2.0, 0.0)
    res = compare_iteration(pred, meas)
    assert res["rank_microbatch"]["compute_ape"].to_numpy() == pytest.approx([0.5, 0.5, 0.5])
    assert res["microbatch"]["ape"].to_numpy() == pytest.approx([0.5, 0.5])
    assert res["iteration_ape"] == pytest.approx(0.0)  # both end at the sync's end, 10 s
    s = summarise([res, res])
    assert s["rank_microbatch_mape"] == pytest.approx(0.5) and s["compute_ratio_median"] == pytest.approx(0.5)


def test_mismatched_timelines_are_an_error():
    pred = two_rank_timeline(1.0, 0.0)
    meas = pred[~((pred["rank"] == 1) & (pred.microbatch == 0))]
    with pytest.raises(ValueError, match="rank 1, microbatch 0 only in the predicted"):
        compare_iteration(pred, meas)


def test_ape_mape_and_rankings():
    assert ape(3.0, 2.0) == pytest.approx(0.5) and math.isnan(float(ape(1.0, 0.0)))
    assert mape([1, 3], [2, 2]) == pytest.approx(0.5)
    assert ranking({"a": 3.0, "b": 1.0, "c": 2.0}) == ["b", "c", "a"]
    assert same_ranking({"a": 1.0, "b": 2.0}, {"a": 10.0, "b": 20.0})
    assert not same_ranking({"a": 1.0, "b": 2.0}, {"a": 20.0, "b": 10.0})
    assert same_ranking({"a": 1.0, "b": 1.01}, {"a": 20.0, "b": 10.0})  # a predicted tie
