"""The streamed results table: its content does not depend on the chunking and matches a whole-table write."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dcpsim.experiments.sweep.results import table_schema, write_results

ROWS = [  # 7 rows: a failed one first (no metrics), then mixed kinds, missing values, booleans
    {"point": 0, "grid.trace": "32k", "pool": 4, "cal": None, "error": "InfeasibleError: x",
     "elapsed_s": 0.5},
    {"point": 1, "grid.trace": 7, "pool": 8, "cal": None, "t": 1.5, "n": 3, "fits": True, "error": "",
     "elapsed_s": 0.25},
    {"point": 2, "grid.trace": "32k", "pool": 8, "cal": None, "t": 2, "n": 4, "fits": False, "error": "",
     "elapsed_s": 0.125},
    {"point": 3, "grid.trace": 7, "pool": 16, "cal": None, "t": float("nan"), "n": 5, "fits": True,
     "error": "", "elapsed_s": 1.0},
    {"point": 4, "grid.trace": "32k", "pool": 16, "cal": None, "error": "ValueError: y", "elapsed_s": 2.0},
    {"point": 5, "grid.trace": 7, "pool": 32, "cal": None, "t": 4.0, "n": 6, "fits": True, "extra": "z",
     "error": "", "elapsed_s": 3.0},
    {"point": 6, "grid.trace": "32k", "pool": 32, "cal": None, "t": 5.0, "n": 7, "fits": True, "error": "",
     "elapsed_s": 4.0},
]


def test_schema_is_what_pandas_gives_the_whole_table():
    schema, n = table_schema(ROWS, last=("error", "elapsed_s"))
    assert n == 7
    assert schema.names == ["point", "grid.trace", "pool", "cal", "t", "n", "fits", "extra", "error",
                            "elapsed_s"]
    types = dict(zip(schema.names, schema.types))
    assert types["point"] == pa.int64() and types["pool"] == pa.int64()
    assert types["grid.trace"] == pa.string()  # "32k" and 7: mixed kinds become strings
    assert types["cal"] == pa.null()  # never a value
    assert types["t"] == pa.float64()  # ints and floats
    assert types["n"] == pa.float64()  # ints, but missing in the failed rows: NaN, as pandas does
    assert types["fits"] == pa.bool_() and types["extra"] == pa.string()


def test_chunking_does_not_change_the_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write_results(lambda: iter(ROWS), a, chunk_rows=2)
    paths, n = write_results(lambda: iter(ROWS), b, chunk_rows=4096)
    assert n == 7 and [p.name for p in paths] == ["results.parquet", "results.csv"]
    assert (a / "results.csv").read_bytes() == (b / "results.csv").read_bytes()
    ta, tb = pq.read_table(a / "results.parquet"), pq.read_table(b / "results.parquet")
    assert ta.equals(tb) and pq.ParquetFile(a / "results.parquet").num_row_groups == 4
    assert not list(a.glob(".*.tmp"))


def test_csv_matches_a_whole_table_pandas_write(tmp_path):
    write_results(lambda: iter(ROWS), tmp_path, chunk_rows=3)
    df = pd.DataFrame(ROWS)
    df = df[[c for c in df.columns if c not in ("error", "elapsed_s")] + ["error", "elapsed_s"]]
    assert (tmp_path / "results.csv").read_text() == df.to_csv(index=False)
    back = pd.read_parquet(tmp_path / "results.parquet")
    assert back["n"].tolist()[1:4] == [3.0, 4.0, 5.0] and math.isnan(back["n"][0])
    assert back["grid.trace"].tolist() == ["32k", "7", "32k", "7", "32k", "7", "32k"]


def test_empty_table(tmp_path):
    paths, n = write_results(lambda: iter([]), tmp_path)
    assert n == 0 and len(pd.read_parquet(paths[0])) == 0 and paths[1].read_text() == ""
