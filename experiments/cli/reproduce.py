"""``dcpsim reproduce``: the cost model against every published measurement the project ships.

For each measurement: the model's prediction, the measured value, the relative error and the tolerance of
its suite (``cost_models/data/reference/tolerances.csv``, written beside the data with the reason). Suites:

* ``attention:<backend>``: every head-dim-128 attention row of the shipped profile (FlashAttention-3 paper:
  FA3, FA2, cuDNN 9.1 on H100; FA2 paper fwd+bwd; cudnn-frontend on H200), predicted by that backend's curve
  of the device's shipped calibration (seconds).
* ``nccl``: every nccl-tests row (H100 x8 NVLink: all_gather, all_reduce, reduce_scatter at 2/4/8 GPUs),
  predicted by the calibration's α–β link model (seconds).
* ``cp_benchmark``: TransformerEngine's CP benchmark (H100, 32 q / 8 KV heads, d 128, causal, 524,288 packed
  tokens): the speed-up from CP2 to CP8 of one 512K sequence (measured 3.98–4.23x) and of 256 documents of
  2K (3.03–3.41x), each CP degree with its fastest engine (ring, Ulysses or hybrid), attention only (forward
  + backward, exposed CP communication, fixed costs). The error is the distance to the measured range over
  its middle (0 inside it).
* ``ring_attention``: ring-flash-attention's zigzag ring on 8 H800 (Llama-3.1-8B attention, 8K tokens per
  GPU, forward + backward) reaches 90% of the no-communication ideal; predicted: the ring's attention compute
  over its whole time (compute, exposed transfers, per-step fixed costs), with the H800's NVLink at 400 of
  the H100's 900 GB/s (NVIDIA H800 data sheet) scaling the send/recv bandwidth.
* ``cp_scaling``: DistCA per-document attention times on H100 (head configuration unknown, so relative
  only): the CP speed-up over CP1 at the same length, TP 1, L ≥ 2K, against c · eff(L/c) / eff(L) of the
  calibration's single (FA3) forward curve.

Not reproduced: FA3's head-dim 64 and 256 rows (the backend curves are d 128), ring-flash-attention's plain
(unbalanced) ring (dcpsim models the dual-chunk ring only), the Llama 3 paper's MFU (a whole training job).

Examples:
  dcpsim reproduce
  dcpsim reproduce --json
  dcpsim reproduce --suite nccl
"""

from __future__ import annotations

import argparse

from dcpsim.experiments.output.write import dumps_json
from dcpsim.experiments.studies.reproduction import SUITES

NAME = "reproduce"
HELP = "the cost model against every shipped published measurement: prediction, measured, error"
ORDER = 46


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", action="append", choices=sorted(SUITES),
                   help="only this suite (repeatable; default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.output.tables import format_table
    from dcpsim.experiments.studies.reproduction import all_cases, suite_summaries

    cases = all_cases(args.suite)
    bad = [c for c in cases if not c.ok]
    if args.json:
        doc = {"cases": [c.to_dict() for c in cases], "out_of_tolerance": len(bad)}
        print(dumps_json(doc, "--json", sort_keys=True))
        return 1 if bad else 0
    g = lambda v: f"{v:.4g}"
    measured = lambda c: f"{g(c.measured_range[0])}–{g(c.measured_range[1])}" if c.measured_range else g(c.measured)
    rows = [[c.suite, c.case, g(c.predicted), measured(c), "within range" if c.in_range else f"{c.error:+.1%}",
             f"{c.tolerance:.0%}", "ok" if c.ok else "OUT"] for c in cases]
    print(format_table(rows, ["suite", "case", "predicted", "measured", "error", "tolerance", ""]))
    for s in suite_summaries(cases):
        print(f"{s['suite']}: {s['cases']} cases, median |error| {s['median_abs_error']:.1%}, "
              f"max {s['max_abs_error']:.1%}, tolerance {s['tolerance']:.0%}")
    print(f"{len(cases) - len(bad)} of {len(cases)} within tolerance")
    return 1 if bad else 0
