"""Trace files, distribution specs and batch sizes: every value read from a trace is checked for type,
finiteness and range; files are regular files read as UTF-8 with bounded nesting; sizes that cannot run are
refused up front with the limit named."""

from __future__ import annotations

from pathlib import Path

from tests.adversarial.corpus import DIRECTORY, FIFO, Case


def _parquet(columns: dict) -> object:
    def write(path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table(columns), path)

    return write


def _symlink_to_fifo(path: Path) -> None:
    import os

    os.mkfifo(path.with_name("real.fifo"))
    path.symlink_to(path.with_name("real.fifo"))


def trace(name: str, content: object, expect: str, *, sub: bool = False) -> Case:
    return Case(f"trace-{name}", ("trace", name), expect, files={name: content}, subprocess=sub)


def compare(name: str, content: object, expect: str) -> Case:
    argv = ("compare", "--trace", name, "--iterations", "1", "--policies", "static-cp")
    return Case(f"compare-{name}", argv, expect, files={name: content})


def spec(text: str, expect: str, *extra: str) -> Case:
    return Case(f"spec-{text}{''.join(extra)}", ("trace", text, "--count", "1000", *extra), expect)


BIG = str(2**70)
CASES = [
    # CSV: rows wider than the header (pandas would make the first column an index: wrong lengths)
    trace("wide_first.csv", "length\n100,5\n200,6\n", "row 1 (line 2) has 2 fields but the header has 1"),
    trace("wide_later.csv", "length,step\n1,0\n2,0,5\n", "row 2 (line 3) has 3 fields but the header has 2"),
    trace("wide_quoted.csv", 'length,doc\n1,"a,b"\n2,"c",x\n', "row 2 has 3 fields but the header has 2"),
    trace("two_length.csv", "length,length\n1,2\n", "names 'length' twice"),
    trace("latin1.csv", b"length\n12\n\xe9\n", "line 3, column 1: byte b'\\xe9' is not UTF-8"),
    trace("nan.csv", "length\n5\nnan\n", "row 2, field 'length': empty or missing value (NaN)"),
    trace("inf.csv", "length\n5\ninf\n", "not a finite number"),
    trace("neginf.csv", "length\n-inf\n", "not a finite number"),
    trace("frac.csv", "length\n5\n12.5\n", "not a whole number"),
    trace("zero.csv", "length\n0\n", "row 1, field 'length': zero"),
    trace("negative.csv", "length\n3\n-4\n", "row 2, field 'length': negative"),
    trace("int64.csv", f"length\n{2**63}\n", "outside the int64 range"),
    trace("huge.csv", f"length\n{BIG}\n", "outside the int64 range"),
    trace("above_max.csv", f"length\n{2**41}\n", "above the maximum 1099511627776"),
    trace("text.csv", "length\n5\nabc\n", "not a number"),
    trace("empty_cell.csv", "length,step\n5,0\n,1\n", "empty or missing value"),
    trace("no_length.csv", "len\n5\n", "no 'length' column"),
    trace("empty.csv", "", "file is empty"),
    trace("header_only.csv", "length,step\n", "no rows"),
    trace("negstep.csv", "length,step\n3,0\n3,-1\n", "field 'step': negative"),
    # JSON / JSONL
    trace("deep.json", "[" * 100_000 + "]" * 100_000, "nested 100000 levels deep, over the limit of 64"),
    trace("deep_objects.json", '{"a":' * 5000 + "1" + "}" * 5000, "over the limit of 64"),
    trace("latin1.json", b"[1,\n2,\xff]", "line 2, column 3: byte b'\\xff' is not UTF-8"),
    trace("nan.json", "[1, NaN]", "NaN is not a JSON number"),
    trace("infinity.json", "[1, Infinity]", "Infinity is not a JSON number"),
    trace("overflow_float.json", "[1, 1e400]", "not a finite number"),
    trace("huge.json", f"[1, {BIG}]", "outside the int64 range"),
    trace("above_max.json", f"[1, {2**45}]", "above the maximum"),
    trace("negative.json", "[1, -1]", "row 2, field 'length': negative"),
    trace("zero.json", '[{"length": 0}]', "row 1, field 'length': zero"),
    trace("frac.json", "[1.5]", "not a whole number"),
    trace("string.json", '["abc"]', "not a number"),
    trace("bool.json", "[true]", "a boolean"),
    trace("nested_list.json", "[[1], [2]]", "not a number"),
    trace("dict.json", '{"length": [1, 2]}', "top-level JSON value is a dict"),
    trace("broken.json", "[1, 2", "not valid JSON"),
    trace("empty_list.json", "[]", "no rows"),
    trace("deep.jsonl", '{"length": 1}\n{"length": ' + "[" * 5000 + "]" * 5000 + "}\n",
          "over the limit of 64"),
    trace("nan.jsonl", '{"length": 1}\n{"length": NaN}\n', "NaN is not a length"),
    trace("latin1.jsonl", b'{"length": 1}\n{"length": "\xe9"}\n', "is not UTF-8"),
    trace("no_key.jsonl", '{"length": 1}\n{"len": 2}\n', "object has no 'length' key"),
    trace("broken.jsonl", '{"length": 1}\n{"length": \n', "row 2 (line 2): not valid JSON"),
    trace("huge.jsonl", f'{{"length": {BIG}}}\n', "outside the int64 range"),
    # Parquet
    trace("nan.parquet", _parquet({"length": [1.0, float("nan")]}), "row 2, field 'length'"),
    trace("negative.parquet", _parquet({"length": [5, -2]}), "negative"),
    trace("strings.parquet", _parquet({"length": ["5", "x"]}), "not a number"),
    trace("garbage.parquet", b"PAR1 this is not parquet", "not a readable Parquet file"),
    # not regular files: must not block (run as a subprocess under a time limit)
    trace("pipe.csv", FIFO, "is a FIFO (named pipe), not a regular file", sub=True),
    trace("pipe.json", FIFO, "is a FIFO (named pipe), not a regular file", sub=True),
    trace("link.jsonl", _symlink_to_fifo, "is a FIFO (named pipe), not a regular file", sub=True),
    trace("folder.csv", DIRECTORY, "is a directory, not a regular file"),
    Case("trace-missing", ("trace", "missing.csv"), "file not found"),
    Case("trace-unknown-extension", ("trace", "t.txt"), "unknown trace format '.txt'",
         files={"t.txt": "length\n1\n"}),
    # the compare command reads traces the same way
    compare("wide.csv", "length\n100,5\n200,6\n", "row 1 (line 2) has 2 fields but the header has 1"),
    compare("deep.json", "[" * 100_000 + "]" * 100_000, "over the limit of 64"),
    compare("nan.parquet", _parquet({"length": [1.0, float("nan")]}), "row 2, field 'length'"),
    Case("compare-fifo", ("compare", "--trace", "pipe.csv", "--iterations", "1", "--policies", "static-cp"),
         "is a FIFO", files={"pipe.csv": FIFO}, subprocess=True),
    # distribution specs with absurd parameters: refused up front, no MemoryError
    spec("lognormal:mu=1000,sigma=1", "parameter 'mu' = 1000 is invalid"),
    spec("lognormal:median=1000,sigma=40", "parameter 'sigma' = 40 is invalid; expected a number in [0, 8]"),
    spec("lognormal:mean=1e300,sigma=1", "parameter 'mean' = 1e+300 is invalid"),
    spec("lognormal:median=100,sigma=1,max=1e13", "parameter 'max' = 1e+13 is invalid"),
    spec("pareto:median=100,sigma=1,tail_start=1e20,alpha=1,tail_frac=0.1", "parameter 'tail_start'"),
    spec("lognormal:median=nan,sigma=1", "expected a finite number"),
    spec("lognormal:median=100,sigma=-1", "parameter 'sigma' = -1 is invalid"),
    spec("mix:1*lognormal:mu=1000,sigma=1", "parameter 'mu' = 1000 is invalid"),
    # sizes that cannot run: refused with the limit named
    Case("size-count", ("trace", "256k", "--count", str(10**12)), "at most 16,777,216 documents (2^24)"),
    Case("size-context-1", ("trace", "256k", "--context-len", "1"), "over the limit of 16,777,216 (2^24)"),
    Case("size-batch-tokens", ("compare", "--global-batch-tokens", str(10**12), "--iterations", "1",
                               "--policies", "static-cp"), "over the limit of 262,144 (2^18)"),
    Case("size-batch-seqs", ("compare", "--global-batch-seqs", "1000000", "--iterations", "1",
                             "--policies", "static-cp"), "1,000,000 sequences (global_batch_seqs)"),
    Case("size-tiny-docs", ("compare", "--trace", "lognormal:mu=1,sigma=0", "--iterations", "1",
                            "--policies", "static-cp"), "over the limit of 262,144 (2^18)"),
    Case("size-sigma-40", ("compare", "--trace", "lognormal:median=1000,sigma=40", "--iterations", "1",
                           "--policies", "static-cp"), "parameter 'sigma' = 40 is invalid"),
    # a failed command leaves earlier outputs as they were
    Case("keep-plot", ("trace", "bad.csv", "--plot", "lengths.png"), "not a number",
         files={"bad.csv": "length\nabc\n"}, keep={"lengths.png": b"an earlier plot"}),
    Case("keep-simulate-outputs", ("simulate", "--trace", "wide.csv", "--iterations", "1",
                                   "--plan-out", "plan.json", "--timeline-out", "timeline.csv",
                                   "--chrome-trace", "chrome.json"),
         "has 2 fields but the header has 1", files={"wide.csv": "length\n100,5\n"},
         keep={"plan.json": b'{"earlier": 1}', "timeline.csv": b"earlier", "chrome.json": b"[]"}),
    Case("keep-simulate-fifo", ("simulate", "--trace", "pipe.jsonl", "--iterations", "1",
                                "--plan-out", "plan.json"),
         "is a FIFO", files={"pipe.jsonl": FIFO}, keep={"plan.json": b'{"earlier": 1}'}, subprocess=True),
    Case("keep-simulate-size", ("simulate", "--global-batch-seqs", "1000000", "--iterations", "1",
                                "--plan-out", "plan.json"), "over the limit of 262,144",
         keep={"plan.json": b'{"earlier": 1}'}),
]
