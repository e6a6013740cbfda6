"""``dcpsim calibrate --runs LOG...``: fit a calibration to measured steps, print the k-fold cross-validation,
write the calibration JSON (all or nothing)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from dcpsim.cost_models import Calibration, CalibrationError
from dcpsim.experiments.replay.fit import KNOBS, fit_report, fit_runs
from dcpsim.experiments.replay.replay import check_log, cost_model_of, job_of
from dcpsim.experiments.replay.runlog import LogError
from dcpsim.experiments.replay.sources import load_runs


def run_fit(args: argparse.Namespace, base_of: Callable[[argparse.Namespace], Calibration]) -> int:
    """The runs' GPU (one for all logs) sets the base calibration (``--base``: shipped, published or a file)."""
    if args.profiles:
        raise CalibrationError("calibrate: give profile tables or --runs, not both (fit the kernels first, then "
                               "pass that calibration as --base)")
    if args.folds < 2:
        raise LogError(f"--folds = {args.folds} is invalid: expected an integer ≥ 2")
    from dcpsim.experiments.calibration.fit import calibration_inputs, calibration_json
    from dcpsim.experiments.output.write import Outputs

    inputs = {f"--runs {p}": p for p in args.runs} | calibration_inputs([], args.base)
    with Outputs({"-o": args.output}, inputs) as outs:  # checked before the fit; written at the end
        res, logs, base = _fit(args, base_of)
        outs.write_text("-o", calibration_json(res.calibration))
    print(f"wrote {args.output}: calibration {res.calibration.name!r} fitted to {sum(res.datasets.values())} "
          f"measured iterations of {len(logs)} run(s); other terms from {base.name}")
    print(fit_report(res))
    return 0


def _fit(args: argparse.Namespace, base_of: Callable[[argparse.Namespace], Calibration]) -> tuple:
    logs = load_runs(args.runs, args.source)
    gpus = {job_of(log, p).gpu.name for p, log in zip(args.runs, logs)}
    if len(gpus) != 1:
        raise LogError(f"--runs: the logs are on GPUs {', '.join(sorted(gpus))}; fit one GPU at a time")
    gpu_name = gpus.pop()
    base = base_of(argparse.Namespace(**{**vars(args), "gpu": gpu_name}))
    for p, log in zip(args.runs, logs):
        check_log(log, cost_model_of(log, base, p), p)
    gpu = job_of(logs[0]).gpu
    knobs = [k.strip() for k in args.knobs.split(",") if k.strip()] if args.knobs else list(KNOBS)
    res = fit_runs(logs, base, gpu, knobs=knobs, folds=args.folds, name=args.name or f"{gpu_name}-fitted-to-runs",
                   progress=lambda s: print(s, file=sys.stderr))
    return res, logs, base
