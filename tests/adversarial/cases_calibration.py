"""Calibration JSON (``--calibration FILE.json``): checked key by key, so a misspelled key names the valid
keys and no list, string, NaN, zero peak or zero bandwidth reaches the cost model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adversarial.corpus import DIRECTORY, FIFO, Case


def _shipped() -> dict[str, Any]:
    from dcpsim.cost_models.calibration import DATA_DIR

    return json.loads((DATA_DIR / "calibration_h100.json").read_text())


def edited(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """A writer of the shipped H100 calibration with one change."""

    def write(path: Path) -> None:
        d = _shipped()
        change(d)
        path.write_text(json.dumps(d))

    return write


def cal(name: str, content: object, expect: str, *, sub: bool = False) -> Case:
    argv = ("cost", "--model", "llama3-8b", "--gpu", "h100", "--calibration", name, "--seq-len", "4096")
    return Case(f"calibration-{name}", argv, expect, files={name: content}, subprocess=sub)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    *parents, last = path.split("/")

    def change(d: dict[str, Any]) -> None:
        for p in parents:
            d = d[p]
        d[last] = value

    return change


CASES = [
    cal("list_table.json", edited(_set("attn_fwd", [649, 567])),
        "attn_fwd = [649, 567] is invalid: expected a JSON object with keys peak_tflops, half"),
    cal("nan.json", '{"name": "x", "gemm": {"peak_tflops": NaN, "half": 1}}', "NaN is not a JSON number"),
    cal("zero_peak.json", edited(_set("gemm/peak_tflops", 0)), "gemm.peak_tflops = 0 is invalid: expected a "
        "finite number > 0"),
    cal("neg_peak.json", edited(_set("attn_bwd/peak_tflops", -5.0)), "attn_bwd.peak_tflops = -5.0 is invalid"),
    cal("neg_half.json", edited(_set("attn_fwd/half", -1)), "attn_fwd.half = -1 is invalid: expected a finite "
        "number ≥ 0"),
    cal("zero_bw.json", edited(_set("comm/all_gather:network/busbw_gbs", 0)),
        "comm.all_gather:network.busbw_gbs = 0 is invalid: expected a finite number > 0"),
    cal("neg_latency.json", edited(_set("comm/all_gather:network/base_s", -1e-6)),
        "comm.all_gather:network.base_s = -1e-06 is invalid"),
    cal("string.json", edited(_set("attn_bwd/half", "700")), "attn_bwd.half = '700' is invalid"),
    cal("bool.json", edited(_set("gemm/half", True)), "gemm.half = True is invalid"),
    cal("big.json", edited(_set("gemm/half", 10**40)), "outside the int64 range"),
    cal("typo_top.json", edited(_set("layer_overhead_fwd", 1e-5)),
        "unknown key layer_overhead_fwd (check its spelling); valid keys: name, attn_fwd"),
    cal("typo_curve.json", edited(_set("gemm/peak_tflop", 1.0)),
        "unknown key gemm.peak_tflop (check its spelling); valid keys in gemm: peak_tflops, half"),
    cal("typo_comm.json", edited(_set("comm/allreduce:nvlink", {"base_s": 0, "hop_s": 0, "busbw_gbs": 1})),
        "unknown key comm.allreduce:nvlink (check its spelling); valid keys in comm: send_recv:nvlink"),
    cal("missing_link_key.json", edited(_set("comm/all_gather:network", {"base_s": 0, "hop_s": 0})),
        "key comm.all_gather:network.busbw_gbs is missing; required in comm.all_gather:network: base_s"),
    cal("neg_overhead.json", edited(_set("layer_overhead_fwd_s", -1.0)), "layer_overhead_fwd_s = -1.0 is "
        "invalid"),
    cal("name_number.json", edited(_set("name", 7)), "name = 7 is invalid: expected a string"),
    cal("comm_list.json", edited(_set("comm", [])), "comm = [] is invalid: expected a JSON object"),
    cal("attention_list.json", edited(_set("attention", [1])), "attention = [1] is invalid: expected a JSON "
        "object"),
    cal("empty.json", "{}", "key name is missing; required: name, attn_fwd, attn_bwd, gemm"),
    cal("array.json", "[1, 2, 3]", "the document = [1, 2, 3] is invalid: expected a JSON object"),
    cal("syntax.json", '{"name": ', "not valid JSON"),
    cal("latin1.json", b'{"name": "\xe9"}', "byte b'\\xe9' is not UTF-8"),
    cal("deep.json", "[" * 5000 + "]" * 5000, "nested 5000 levels deep, over the limit of 64"),
    cal("dir.json", DIRECTORY, "is a directory, not a regular file; expected a calibration file"),
    cal("pipe.json", FIFO, "is a FIFO (named pipe), not a regular file", sub=True),
]

# A profile table (dcpsim calibrate, dcpsim validate --profile): read through the same safe reader and checked
# whole before anything else; validate names a broken table even where torch is missing.
CASES += [
    Case("profile-calibrate-latin1", ("calibrate", "p.csv", "-o", "c.json"), "byte b'\\xff' is not UTF-8",
         files={"p.csv": b"op,seconds\n\xff\n"}),
    Case("profile-calibrate-dir", ("calibrate", "p.csv", "-o", "c.json"), "p.csv: is a directory",
         files={"p.csv": DIRECTORY}),
    Case("profile-calibrate-fifo", ("calibrate", "p.csv", "-o", "c.json"), "p.csv: is a FIFO (named pipe)",
         files={"p.csv": FIFO}, subprocess=True),
    Case("profile-validate-broken", ("validate", "--profile", "p.csv"), "p.csv: missing column(s) q_len",
         files={"p.csv": "op,seconds\nattn_fwd,abc\n"}),
    Case("profile-validate-latin1", ("validate", "--profile", "p.csv"), "byte b'\\xff' is not UTF-8",
         files={"p.csv": b"op,seconds\n\xff\n"}),
    Case("profile-validate-fifo", ("validate", "--profile", "p.csv"), "p.csv: is a FIFO (named pipe)",
         files={"p.csv": FIFO}, subprocess=True),
]
