"""The timeline schema (``sim.timeline``): one declaration of the columns, the dtypes a Timeline holds, the
builders from records and frames, and one-line errors that name the row, the column and the value."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.policies import CPGroup, Engine, make_plan
from dcpsim.sim.simulate import simulate_plan
from dcpsim.sim.timeline import COLUMNS, SCHEMA, Timeline, TimelineError
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import constant_model


def rec(**kw):
    base = {"stage": 0, "rank": 0, "microbatch": 0, "phase": "F", "kind": "compute", "comm": "", "start": 0.0,
            "end": 1.0, "tokens": 100.0}
    return base | kw


def test_columns_are_the_schema_names_in_order():
    assert COLUMNS == ("stage", "rank", "microbatch", "phase", "kind", "comm", "start", "end", "tokens")
    assert [c.name for c in SCHEMA] == list(COLUMNS)
    assert {c.name for c in SCHEMA if c.values is not None} == {"phase", "kind", "comm"}


def test_records_become_schema_dtypes_and_extra_keys_are_dropped():
    recs = [rec(workload="w", iteration=3),
            rec(kind="comm", comm="cp", start=1.0, end=1.5),
            rec(rank=1, microbatch=-1, phase="S", kind="idle", start=0.5, end=2.0, tokens=0.0)]
    tl = Timeline.from_records(recs, 1, 2)
    assert set(tl.columns) == set(COLUMNS)
    assert [str(tl[c].dtype) for c in ("stage", "rank", "microbatch", "start", "end", "tokens")] == \
        ["int32", "int32", "int32", "float64", "float64", "float64"]
    assert tl["kind"].tolist() == ["compute", "comm", "idle"] and tl["comm"].tolist() == ["", "cp", ""]
    assert tl.iteration_time == 2.0
    assert tl.duration.tolist() == [1.0, 0.5, 1.5]


def test_frame_round_trip_keeps_every_value():
    plan = make_plan("t", 2, [[CPGroup((0, 1), (0,), Engine.for_size("ring", 2))],
                              [CPGroup((0,), (1,), Engine()), CPGroup((1,), (2,), Engine())]])
    tl = simulate_plan(plan, GlobalBatch.of([4000, 1000, 3000]), constant_model(pool=2, pp=2)).timeline
    tl.check()  # the simulator's own timelines fit the schema
    back = Timeline.from_frame(tl.to_frame())
    assert (back.num_stages, back.pool_size) == (2, 2)
    for c in COLUMNS:
        assert np.array_equal(back[c], tl[c]), c
        assert back[c].dtype == tl[c].dtype or c in ("phase", "kind", "comm"), c


@pytest.mark.parametrize("bad, message", [
    (rec(phase="X"), r"row 1, column 'phase' = 'X'; valid: 'F', 'B', 'S'"),
    (rec(kind="busy"), r"row 1, column 'kind' = 'busy'; valid: 'compute', 'comm', 'idle'"),
    (rec(kind="comm", comm="nvlink"), r"row 1, column 'comm' = 'nvlink'; valid: '', 'cp', 'pp', 'dp', 'tp'"),
    (rec(kind="comm", comm=""), r"row 1 has kind 'comm' and comm ''"),
    (rec(comm="cp"), r"row 1 has kind 'compute' and comm 'cp'"),
    (rec(rank=4), r"row 1, column 'rank' = 4; expected 0 … 1"),
    (rec(stage=1), r"row 1, column 'stage' = 1; expected 0 … 0"),
    (rec(microbatch=-2), r"row 1, column 'microbatch' = -2; expected ≥ -1"),
    (rec(start=2.0, end=1.0), r"row 1 ends at 1.0 s, before its start 2.0 s"),
    (rec(end=float("nan")), r"row 1, column 'end' = nan; expected a finite number ≥ 0"),
    (rec(tokens=-1.0), r"row 1, column 'tokens' = -1.0"),
])
def test_bad_values_are_named_in_one_line(bad, message):
    with pytest.raises(TimelineError, match=message) as e:
        Timeline.from_records([rec(), bad], 1, 2, source="run/timeline.csv")
    assert str(e.value).startswith("run/timeline.csv: ") and "\n" not in str(e.value)


def test_missing_column_and_unreadable_values():
    r = rec()
    del r["tokens"]
    with pytest.raises(TimelineError, match=r"record 1 lacks column 'tokens'"):
        Timeline.from_records([rec(), r], 1, 1)
    with pytest.raises(TimelineError, match=r"column 'rank' cannot be read as int32"):
        Timeline.from_records([rec(rank="abc")], 1, 1)
    with pytest.raises(TimelineError, match=r"lacks column\(s\) \['tokens'\]"):
        Timeline({c: np.zeros(1) for c in COLUMNS if c != "tokens"}, 1, 1)
    with pytest.raises(TimelineError, match="differ in length"):
        Timeline({c: np.zeros(2 if c == "end" else 1) for c in COLUMNS}, 1, 1)


def test_empty_timeline():
    tl = Timeline.from_records([], 1, 4)
    assert len(tl) == 0 and tl.iteration_time == 0.0 and tl["phase"].dtype.kind == "U"
