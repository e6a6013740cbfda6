"""Comparing predicted and measured timelines (real_runtime.compare): closed-form cases, no processes."""

import math

import pytest

torch = pytest.importorskip("torch")  # the rule of tests/real_runtime (compare itself needs no torch)

import pandas as pd

from dcpsim.real_runtime.compare import (
    ape,
    compare_iteration,
    mape,
    rank_microbatch_times,
    ranking,
    ranking_verdict,
    run_spread,
    same_ranking,
    summarise,
)
from dcpsim.sim.timeline import COLUMNS


def timeline(rows):
    return pd.DataFrame([dict(zip(COLUMNS, r)) for r in rows])


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


def test_run_spread_is_the_mean_relative_range_of_repeated_steps():
    assert run_spread([[1.0, 1.2], [2.0, 2.0, 1.8]]) == pytest.approx((0.2 / 1.1 + 0.2 / (5.8 / 3)) / 2)
    assert math.isnan(run_spread([[1.0], [2.0]]))  # no step ran twice: no estimate


def test_ranking_verdict_separates_disagreements_within_noise():
    pred = {"a": 1.0, "b": 2.0, "c": 3.0}
    same = ranking_verdict(pred, {"a": 1.0, "b": 1.5, "c": 2.0}, {"a": 0.1, "b": 0.1, "c": 0.1})
    assert same["verdict"] == "same" and same["agree"] == 3 and same["agree_resolved"] == 3
    # the same order, but b and c only 25% apart with a 30% spread: decided within noise
    close = ranking_verdict(pred, {"a": 1.0, "b": 1.5, "c": 2.0}, {"a": 0.1, "b": 0.1, "c": 0.3})
    assert close["verdict"] == "same within noise" and close["disagree"] == 0 and close["agree_resolved"] == 2
    # b and c swap by 5%, inside a 10% spread: within noise; a and b stay resolved
    noisy = ranking_verdict(pred, {"a": 1.0, "b": 2.0, "c": 1.9}, {"a": 0.02, "b": 0.1, "c": 0.02})
    assert noisy["verdict"] == "same within noise" and noisy["disagree"] == 1 and noisy["disagree_resolved"] == 0
    bc = next(p for p in noisy["pairs"] if p[:2] == ("b", "c"))
    assert bc[2] == pytest.approx(0.05) and bc[3] == pytest.approx(0.1) and not bc[4] and not bc[5]
    # the same swap with a 2% spread is resolved: different
    assert ranking_verdict(pred, {"a": 1.0, "b": 2.0, "c": 1.9}, {"a": 0.02, "b": 0.02, "c": 0.02})["verdict"] \
        == "different"
    # no noise estimate: every difference counts; predicted ties are not compared
    assert ranking_verdict(pred, {"a": 1.0, "b": 2.0, "c": 1.9}, {})["verdict"] == "different"
    tie = ranking_verdict({"a": 1.0, "b": 1.01}, {"a": 2.0, "b": 1.0}, {})
    assert tie["verdict"] == "same" and tie["pairs"] == []
