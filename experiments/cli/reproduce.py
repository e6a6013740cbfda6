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

* ``--steps`` (end-to-end, run on its own: minutes): every shipped measured-step dataset (DistCA's files by
  mode, Megatron-LM's functional-test golden case) replayed with the shipped calibration of its GPU, one row
  each: iterations, in-sample MAPE, k-fold cross-validated MAPE of refitting that calibration with
  ``calibrate --runs``'s fit (k − 1 folds fitted, the held-out fold simulated), mean error, correlation and
  what the importer assumes; one more row per GPU for its datasets together. ``--markdown`` prints
  docs/validation.md's table; ``--write-docs docs/validation.md`` rewrites it and the scatter beside it.

Not reproduced: FA3's head-dim 64 and 256 rows (the backend curves are d 128), ring-flash-attention's plain
(unbalanced) ring (dcpsim models the dual-chunk ring only), the Llama 3 paper's MFU (a whole training job).

Examples:
  dcpsim reproduce
  dcpsim reproduce --json
  dcpsim reproduce --suite nccl
  dcpsim reproduce --steps
  dcpsim reproduce --steps --write-docs docs/validation.md
"""

from __future__ import annotations

import argparse
import sys

from dcpsim.experiments.output.write import dumps_json
from dcpsim.experiments.studies.reproduction import SUITES

NAME = "reproduce"
HELP = "the cost model against every shipped published measurement: prediction, measured, error"
ORDER = 46


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", action="append", choices=sorted(SUITES),
                   help="only this suite (repeatable; default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--steps", action="store_true",
                   help="the end-to-end suite instead: measured training steps replayed and cross-validated")
    p.add_argument("--folds", type=int, default=5, help="with --steps: cross-validation folds (>= 2; default 5)")
    p.add_argument("--markdown", action="store_true", help="with --steps: print the table as Markdown")
    p.add_argument("--write-docs", metavar="MD",
                   help="with --steps: replace the table in this Markdown file (docs/validation.md) and write "
                        "the scatter beside it")


def run_steps(args: argparse.Namespace) -> int:
    from dcpsim.experiments.errors import OutputError
    from dcpsim.experiments.output.tables import format_table
    from dcpsim.experiments.replay.runlog import LogError
    from dcpsim.experiments.replay.validation import COLUMNS, SHIPPED_KNOBS, markdown, steps_table, write_docs

    if args.suite:
        print("dcpsim reproduce: --suite and --steps are separate runs; give one", file=sys.stderr)
        return 2
    try:
        table = steps_table(folds=args.folds)
        scatter = write_docs(table, args.write_docs) if args.write_docs else None
    except (LogError, OutputError) as e:
        print(f"dcpsim reproduce: {e}", file=sys.stderr)
        return 2
    if args.json:
        from dcpsim.experiments.output.write import nulls_for_nonfinite

        doc = {"folds": table.folds, "rows": [r.to_dict() for r in table.rows]}  # corr null: a constant run
        print(dumps_json(nulls_for_nonfinite(doc), "--json", sort_keys=True))
    elif args.markdown:
        print(markdown(table))
    else:
        print(format_table([r.cells() for r in table.rows], list(COLUMNS)))
        print(f"CV: {table.folds}-fold, refitting {', '.join(SHIPPED_KNOBS)} per GPU")
    if scatter is not None:
        print(f"wrote {args.write_docs} and {scatter}", file=sys.stderr if args.json else sys.stdout)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.steps:
        return run_steps(args)
    if args.markdown or args.write_docs or args.folds != 5:
        print("dcpsim reproduce: --markdown, --write-docs and --folds go with --steps", file=sys.stderr)
        return 2
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
