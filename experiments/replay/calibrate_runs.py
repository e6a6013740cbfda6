"""``dcpsim calibrate --runs LOG...``: fit a calibration to measured steps, print the k-fold cross-validation,
write the calibration JSON (all or nothing)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

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
    out = Path(args.output)
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_text(res.calibration.to_json() + "\n")
        tmp.replace(out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CalibrationError(f"cannot write calibration file {out}: {e.strerror}") from None
    print(f"wrote {out}: calibration {res.calibration.name!r} fitted to {sum(res.datasets.values())} measured "
          f"iterations of {len(logs)} run(s); other terms from {base.name}")
    print(fit_report(res))
    return 0
