"""Fit a calibration (kernel efficiency curves, fixed per-layer overhead, α–β link models) to profile tables
and write it as JSON.

A profile table is a CSV of measured times (schema in docs/calibration.md and cost_models/profile_table.py).
Terms the profiles do not measure keep the base calibration (default: the GPU's shipped one). Use the
result with 'dcpsim simulate --calibration FILE' or 'dcpsim compare --calibration FILE'.

Examples:
  dcpsim calibrate my_profile.csv -o my_cluster.json --gpu h100 --report
  dcpsim calibrate attn.csv nccl.csv -o cal.json --kernel fa3 --head-dim 128 --plot fit.png
  dcpsim calibrate --runs steps.jsonl -o my_cluster.json       # fit to measured steps (docs/validation.md)
  # regenerate the shipped H100 default (same as python -m dcpsim.cost_models.data.build_defaults):
  dcpsim calibrate cost_models/data/profile_h100.csv --gpu h100 --base published \\
      --name h100-reference-fit -o cost_models/data/calibration_h100.json
"""

from __future__ import annotations

import argparse
import sys

NAME = "calibrate"
HELP = "fit a calibration JSON to profile tables (kernel curves, per-layer overhead, link models)"
ORDER = 40


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profiles", nargs="*", metavar="PROFILE.csv", help="profile tables (CSV) to fit")
    p.add_argument("--runs", nargs="+", metavar="LOG",
                   help="fit the efficiency parameters to measured steps instead (run logs, or importer inputs "
                        "with --from; docs/validation.md); prints k-fold cross-validation")
    p.add_argument("--from", dest="source", default="runlog", metavar="runlog|distca|megatron",
                   help="with --runs: what the files are (default runlog)")
    p.add_argument("--folds", type=int, default=5, help="with --runs: folds of the cross-validation (default 5)")
    p.add_argument("--knobs", metavar="NAME,...",
                   help="with --runs: the parameters to fit (default all; list in docs/validation.md)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json",
                   help="where to write the calibration")
    p.add_argument("--gpu", default="h100", help="GPU preset whose calibration is the base (default h100)")
    p.add_argument("--base", default="shipped", metavar="shipped|published|FILE",
                   help="calibration kept for terms the profiles do not measure: the GPU's shipped one "
                        "(default), its published figures, or a calibration JSON")
    p.add_argument("--name", help="name of the calibration (default GPU-calibrated)")
    p.add_argument("--kernel", help="attention kernel whose rows set attn_fwd/attn_bwd (default: most rows)")
    p.add_argument("--head-dim", type=int, help="head dimension of those rows (default: the most common)")
    p.add_argument("--device", help="use only rows of this device (default: all rows)")
    p.add_argument("--report", action="store_true",
                   help="print fitted parameters, per-term MAPE and leave-one-out errors, and write a plot")
    p.add_argument("--plot", metavar="FILE.png",
                   help="write measured against fitted curves here (default with --report: next to -o)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dcpsim.cost_models.errors import CalibrationError
    from dcpsim.experiments.calibration.fit import base_calibration, calibration_inputs, calibration_json, fit_profiles
    from dcpsim.experiments.output.write import Outputs

    if args.runs:
        from dcpsim.experiments.replay.calibrate_runs import run_fit

        return run_fit(args, lambda a: base_calibration(a.gpu, a.base))
    if not args.profiles:
        raise CalibrationError("calibrate: give profile tables (PROFILE.csv ...) or --runs LOG ...")
    from dcpsim.experiments.calibration.report import report_text, write_plot

    out = Path(args.output)
    plot = args.plot or (str(out.with_name(out.stem + "_fit.png")) if args.report else None)
    # both outputs checked before the fit, and written together or not at all
    with Outputs({"-o": args.output, "--plot": plot}, calibration_inputs(args.profiles, args.base),
                 images=("--plot",)) as outs:
        fit = fit_profiles(args.profiles, args.output, gpu=args.gpu, base=args.base, name=args.name,
                           kernel=args.kernel, head_dim=args.head_dim, device=args.device)
        outs.write_text("-o", calibration_json(fit.calibration))
        if plot:
            with outs.writing("--plot") as tmp:
                write_plot(fit.profile, fit.calibration, fit.report, str(tmp))
    fitted = [t.key for t in fit.report.terms if t.how != "base"]
    for w in fit.report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {fit.path}: calibration {fit.calibration.name!r} from {len(fit.profile)} profile rows; "
          f"fitted {', '.join(fitted) or 'nothing'}; other terms from {fit.base.name}")
    if args.report:
        print(report_text(fit.report))
    if plot:
        print(f"wrote {plot}")
    return 0
