"""Reading and writing traces: round trips through every format and precise rejections."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcpsim.traces import Trace, TraceError, read_trace, write_trace

FORMATS = [".csv", ".parquet", ".jsonl", ".json"]


def _write_raw(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


# --- round trips -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("with_step", [False, True])
def test_round_trip_each_format(tmp_path: Path, ext: str, with_step: bool) -> None:
    lengths = np.array([1, 4096, 131072, 7, 2**40], dtype=np.int64)
    step = np.array([0, 0, 1, 3, 3], dtype=np.int64) if with_step else None
    trace = Trace(lengths, step=step)
    path = tmp_path / f"trace{ext}"
    write_trace(trace, path)
    back = read_trace(path)
    assert back == trace
    assert back.lengths.dtype == np.int64
    assert (back.step is None) == (not with_step)
    assert back.source == str(path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(st.tuples(st.integers(1, 2**40), st.integers(0, 10**6)), min_size=1, max_size=50),
    ext=st.sampled_from(FORMATS),
    with_step=st.booleans(),
)
def test_round_trip_property(tmp_path: Path, data: list[tuple[int, int]], ext: str, with_step: bool) -> None:
    lengths = np.array([d[0] for d in data], dtype=np.int64)
    step = np.array([d[1] for d in data], dtype=np.int64) if with_step else None
    path = tmp_path / f"prop{ext}"
    write_trace(Trace(lengths, step=step), path)
    back = read_trace(path)
    np.testing.assert_array_equal(back.lengths, lengths)
    if with_step:
        np.testing.assert_array_equal(back.step, step)
    else:
        assert back.step is None


def test_json_without_steps_is_a_plain_list(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_trace(Trace([5, 6, 7]), path)
    assert json.loads(path.read_text()) == [5, 6, 7]


def test_reads_public_dump_shape_and_objects(tmp_path: Path) -> None:
    plain = _write_raw(tmp_path / "plain.json", "[2792, 4238, 642]")
    objects = _write_raw(
        tmp_path / "obj.json", '[{"length": 3, "step": 1, "src": "x"}, {"length": 4, "step": 0}]'
    )
    assert read_trace(plain).lengths.tolist() == [2792, 4238, 642]
    t = read_trace(objects)
    assert t.lengths.tolist() == [3, 4] and t.step.tolist() == [1, 0]


def test_csv_extra_columns_ignored_and_whole_numbers_accepted(tmp_path: Path) -> None:
    path = _write_raw(tmp_path / "t.csv", "doc, step ,length\na,2,12.0\nb,0,1e3\nc,1, 7\n\n\n")
    t = read_trace(path)
    assert t.lengths.tolist() == [12, 1000, 7]
    assert t.step.tolist() == [2, 0, 1]


def test_parquet_string_and_float_columns(tmp_path: Path) -> None:
    a = read_trace(_parquet(tmp_path / "a.parquet", {"length": ["5", "6"], "other": [1.5, 2.5]}))
    b = read_trace(_parquet(tmp_path / "b.parquet", {"length": [5.0, 6.0]}))
    assert a.lengths.tolist() == b.lengths.tolist() == [5, 6]


def test_jsonl_blank_lines_skipped(tmp_path: Path) -> None:
    path = _write_raw(tmp_path / "t.jsonl", '\n{"length": 3}\n\n{"length": 9}\n\n')
    assert read_trace(path).lengths.tolist() == [3, 9]


def test_trace_arrays_are_read_only_copies() -> None:
    src = np.array([3, 4], dtype=np.int64)
    t = Trace(src)
    src[0] = 99
    assert t.lengths.tolist() == [3, 4]
    with pytest.raises(ValueError):
        t.lengths[0] = 1
    assert t.num_tokens == 7 and t.num_docs == len(t) == 2


# --- rejections --------------------------------------------------------------------------------------------

# (file name, content, row, field, value repr, problem words)
BAD_CELLS = [
    ("frac.csv", "length\n5\n12.5\n", 2, "length", "'12.5'", "whole"),
    ("text.csv", "length,step\n5,0\nabc,0\n", 2, "length", "'abc'", "not a number"),
    ("empty_cell.csv", "length\n5\n\n6\n", 2, "length", "''", "empty"),
    # Whole-number CSV columns are parsed as integers, other columns are quoted as written.
    ("zero.csv", "length\n0\n", 1, "length", "0", "zero"),
    ("neg.csv", "x,length\na,3\nb,-4\n", 2, "length", "-4", "negative"),
    ("negtext.csv", "length\n3\n-4\n5.5\n", 2, "length", "'-4'", "negative"),
    ("negstep.csv", "length,step\n3,0\n3,-1\n", 2, "step", "-1", "negative"),
    ("nan.csv", "length\nnan\n", 1, "length", "'nan'", "NaN"),
    ("frac.json", "[4, 3.7]", 2, "length", "3.7", "whole"),
    ("null.json", "[4, 5, null]", 3, "length", "None", "missing"),
    ("bool.json", "[4, true]", 2, "length", "True", "boolean"),
    ("text.json", '[4, "abc"]', 2, "length", "'abc'", "not a number"),
    ("zero.json", '[{"length": 3}, {"length": 0}]', 2, "length", "0", "zero"),
    ("neg.json", "[1, 2, -5]", 3, "length", "-5", "negative"),
    ("list.json", "[1, [2]]", 2, "length", "[2]", "not a number"),
    ("frac.jsonl", '{"length": 3}\n{"length": 2.5}\n', 2, "length", "2.5", "whole"),
    ("zero.jsonl", '{"length": 3}\n\n{"length": 0}\n', 2, "length", "0", "zero"),
    ("neg.jsonl", '{"length": -3}\n', 1, "length", "-3", "negative"),
    ("negstep.jsonl", '{"length": 3, "step": 0}\n{"length": 3, "step": -2}\n', 2, "step", "-2", "negative"),
    ("nokey.jsonl", '{"length": 3}\n{"len": 3}\n', 2, "length", "None", "no 'length' key"),
    ("nostep.jsonl", '{"length": 3, "step": 0}\n{"length": 3}\n', 2, "step", "None", "missing"),
    ("notobj.jsonl", '{"length": 3}\n[3]\n', 2, "length", "[3]", "not a JSON object"),
]


@pytest.mark.parametrize(("name", "content", "row", "field", "value", "words"), BAD_CELLS)
def test_bad_cell_names_file_row_field_value(
    tmp_path: Path, name: str, content: str, row: int, field: str, value: str, words: str
) -> None:
    path = _write_raw(tmp_path / name, content)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    msg = str(info.value)
    assert str(path) in msg
    assert f"row {row}" in msg
    assert f"field {field!r}" in msg
    assert f"(value {value})" in msg
    assert words in msg
    assert "expected" in msg
    assert (info.value.row, info.value.field) == (row, field)


def test_jsonl_message_gives_file_line(tmp_path: Path) -> None:
    path = _write_raw(tmp_path / "t.jsonl", '{"length": 3}\n\n\n{"length": 0}\n')
    with pytest.raises(TraceError, match=r"row 2 \(line 4\)"):
        read_trace(path)


@pytest.mark.parametrize(
    ("columns", "row", "value"),
    [
        ({"length": np.array([5.0, 3.7])}, 2, "3.7"),
        ({"length": pa.array([5, None, 3])}, 2, "nan"),
        ({"length": np.array([5, 0, 3])}, 2, "0"),
        ({"length": np.array([5, 4, -3])}, 3, "-3"),
        ({"length": np.array([5, 4]), "step": np.array([1, -1])}, 2, "-1"),
        ({"length": np.array([True, False])}, 1, "True"),
    ],
)
def test_parquet_bad_values(tmp_path: Path, columns: dict, row: int, value: str) -> None:
    path = _parquet(tmp_path / "bad.parquet", columns)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(path) in str(info.value)
    assert f"row {row}," in str(info.value)
    assert f"(value {value})" in str(info.value)


def test_first_offending_row_in_a_large_file(tmp_path: Path) -> None:
    lengths = np.arange(1, 100_001)
    text = "length\n" + "\n".join(map(str, lengths)) + "\n"
    text = text.replace("\n77777\n", "\n77777.5\n").replace("\n88888\n", "\n-1\n")
    path = _write_raw(tmp_path / "big.csv", text)
    with pytest.raises(
        TraceError, match=r"row 77777, field 'length': not a whole number \(value '77777.5'\)"
    ):
        read_trace(path)


@pytest.mark.parametrize("ext", FORMATS)
def test_empty_file(tmp_path: Path, ext: str) -> None:
    path = _write_raw(tmp_path / f"empty{ext}", b"")
    with pytest.raises(TraceError, match="empty") as info:
        read_trace(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("name", "content"),
    [("h.csv", "length,step\n"), ("b.csv", "length\n\n\n"), ("e.json", "[]"), ("e.jsonl", "\n\n")],
)
def test_no_rows(tmp_path: Path, name: str, content: str) -> None:
    path = _write_raw(tmp_path / name, content)
    with pytest.raises(TraceError, match="no rows") as info:
        read_trace(path)
    assert str(path) in str(info.value)


def test_parquet_no_rows(tmp_path: Path) -> None:
    path = _parquet(tmp_path / "e.parquet", {"length": pa.array([], type=pa.int64())})
    with pytest.raises(TraceError, match="no rows"):
        read_trace(path)


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".json"])
def test_missing_length_column(tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"nolen{ext}"
    if ext == ".csv":
        _write_raw(path, "len,step\n3,0\n")
    elif ext == ".parquet":
        _parquet(path, {"len": [3], "step": [0]})
    else:
        _write_raw(path, '[{"len": 3, "step": 0}]')
    with pytest.raises(TraceError, match="'length'") as info:
        read_trace(path)
    assert str(path) in str(info.value)
    assert "len" in str(info.value)  # names the columns it did find


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("mixed.json", '[1, {"length": 2}]', "plain numbers throughout"),
        ("dict.json", '{"length": [1, 2]}', "top-level JSON value is a dict"),
        ("broken.json", "[1, 2", "not valid JSON"),
        ("broken.jsonl", '{"length": 1}\n{"length": \n', "row 2 (line 2): not valid JSON"),
        ("late_step.jsonl", '{"length": 1}\n{"length": 2, "step": 0}\n', "row 2 (line 2), field 'step'"),
        ("quote.csv", 'length\n"5\n', "CSV"),
    ],
)
def test_malformed_files(tmp_path: Path, name: str, content: str, words: str) -> None:
    path = _write_raw(tmp_path / name, content)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert words in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file_and_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="file not found") as info:
        read_trace(tmp_path / "nope.csv")
    assert "nope.csv" in str(info.value)
    with pytest.raises(TraceError, match=r"unknown trace format '\.txt'.*\.csv, \.parquet, \.jsonl, \.json"):
        read_trace(_write_raw(tmp_path / "t.txt", "length\n1\n"))
    with pytest.raises(TraceError, match="unknown trace format"):
        write_trace(Trace([1]), tmp_path / "t.tsv")
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(TraceError, match="not a regular file"):
        read_trace(tmp_path / "dir.csv")


def test_trace_constructor_validates() -> None:
    with pytest.raises(TraceError, match="no rows"):
        Trace([])
    with pytest.raises(TraceError, match=r"row 2, field 'length': zero"):
        Trace([3, 0])
    with pytest.raises(TraceError, match=r"row 1, field 'step': negative"):
        Trace([3, 4], step=[-1, 0])
    with pytest.raises(TraceError, match="one step per document"):
        Trace([3, 4], step=[0])
    with pytest.raises(TraceError, match="1-D"):
        Trace([[3, 4]])
    with pytest.raises(TraceError, match="expected a Trace"):
        write_trace([1, 2], "x.csv")  # type: ignore[arg-type]
