"""Fit a calibration (kernel efficiency curves, fixed per-layer overhead, α–β link models) to profile tables
and write it as JSON.

A profile table is a CSV of measured times (schema in docs/calibration.md and cost_models/profile_table.py).
Terms the profiles do not measure keep the base calibration (default: the GPU's shipped one). Use the
result with 'dcpsim simulate --calibration FILE' or 'dcpsim compare --calibration FILE'.

Examples:
  dcpsim calibrate my_profile.csv -o my_cluster.json --gpu h100 --report
  dcpsim calibrate attn.csv nccl.csv -o cal.json --kernel fa3 --head-dim 128 --plot fit.png
  # regenerate the shipped H100 default (same as python -m dcpsim.cost_models.data.build_defaults):
  dcpsim calibrate cost_models/data/profile_h100.csv --gpu h100 --base published \\
      --name h100-reference-fit -o cost_models/data/calibration_h100.json
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from dcpsim.cost_models.calibration import Calibration, default_calibration, published_calibration
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.presets import get_gpu

if TYPE_CHECKING:  # pandas and the fitting (scipy) load in run(): 'dcpsim --help' stays fast
    import pandas as pd
    from dcpsim.cost_models.fitting import FitReport

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


def _base(args: argparse.Namespace) -> Calibration:
    gpu = get_gpu(args.gpu)
    if args.base == "shipped":
        return default_calibration(gpu)
    if args.base == "published":
        return published_calibration(gpu)
    return Calibration.load(args.base)


def run(args: argparse.Namespace) -> int:
    if args.runs:
        from dcpsim.experiments.replay.calibrate_runs import run_fit

        return run_fit(args, _base)
    if not args.profiles:
        raise CalibrationError("calibrate: give profile tables (PROFILE.csv ...) or --runs LOG ...")
    from dcpsim.cost_models.fitting import fit_calibration
    from dcpsim.cost_models.profile_table import read_profiles

    profile = read_profiles(args.profiles)
    if args.device is not None:
        profile = profile[profile["device"] == args.device].reset_index(drop=True)
        if profile.empty:
            raise CalibrationError(f"no profile rows of device {args.device!r} in {', '.join(args.profiles)}")
    base = _base(args)
    cal, report = fit_calibration(profile, base, args.name or f"{args.gpu}-calibrated", kernel=args.kernel,
                                  head_dim=args.head_dim)
    out = Path(args.output)
    try:
        out.write_text(cal.to_json() + "\n")
    except OSError as e:
        raise CalibrationError(f"cannot write calibration file {out}: {e.strerror}") from None
    fitted = [t.key for t in report.terms if t.how != "base"]
    print(f"wrote {out}: calibration {cal.name!r} from {len(profile)} profile rows; fitted "
          f"{', '.join(fitted) or 'nothing'}; other terms from {base.name}")
    if args.report:
        print(report_text(report))
    plot = args.plot or (str(out.with_name(out.stem + "_fit.png")) if args.report else None)
    if plot:
        write_plot(profile, cal, report, plot)
        print(f"wrote {plot}")
    return 0


def _fmt_params(params: dict[str, float]) -> str:
    if "peak_tflops" in params:
        return f"peak {params['peak_tflops']:.1f} TFLOP/s, half {params['half']:.0f} tokens"
    if "seconds" in params:
        return f"{params['seconds'] * 1e6:.1f} us per layer per microbatch"
    return (f"base {params['base_s'] * 1e6:.2f} us, hop {params['hop_s'] * 1e6:.2f} us, "
            f"busbw {params['busbw_gbs']:.1f} GB/s")


def report_text(report: FitReport) -> str:
    """Fitted terms with their errors, then the leave-one-out medians per kernel."""
    from dcpsim.experiments.report import format_table

    pct = lambda v: "-" if math.isnan(v) else f"{v:.1%}"
    rows = [[t.key, t.how, _fmt_params(t.params), str(t.rows), pct(t.mape), pct(t.max_ape), t.note]
            for t in report.terms]
    text = format_table(rows, ["term", "how", "parameters", "rows", "MAPE", "max", "note"])
    if report.loo_median:
        loo = ", ".join(f"{k} {v:.1%}" for k, v in report.loo_median.items())
        text += f"\nleave-one-out median |error| of attention rows per kernel: {loo}"
    return text


def write_plot(profile: pd.DataFrame, cal: Calibration, report: FitReport, path: str) -> None:
    """Measured points against fitted curves: attention (and GEMM) TFLOP/s against size; collectives' bus
    bandwidth against bytes."""
    from dcpsim.cost_models.profile_table import ATTENTION_OPS, COMPUTE_OPS, row_size, row_tflops
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    compute_ops = COMPUTE_OPS
    has = {"attention": profile["op"].isin(ATTENTION_OPS).any(), "gemm": (profile["op"] == "gemm").any(),
           "collectives": (~profile["op"].isin(compute_ops)).any()}
    panels = [p for p in ("attention", "gemm", "collectives") if has[p]]
    fig = Figure(figsize=(6.5 * max(len(panels), 1), 4.8))  # object API: the global backend is left alone
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel == "attention":
            _plot_attention(ax, profile, cal, report)
        elif panel == "gemm":
            g = profile[profile["op"] == "gemm"]
            x = np.geomspace(row_size(g).min() / 2, row_size(g).max() * 2, 100)
            ax.plot(row_size(g), row_tflops(g), "o", label="measured")
            ax.plot(x, cal.gemm.tflops(x), "-", label="fitted")
            ax.set(xscale="log", xlabel="tokens", ylabel="TFLOP/s", title="GEMM")
            ax.legend(fontsize=7)
        else:
            _plot_collectives(ax, profile, cal)
    fig.suptitle(f"calibration {cal.name}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise CalibrationError(f"cannot write plot {path}: {e.strerror}") from None


def _plot_attention(ax, profile: pd.DataFrame, cal: Calibration, report: FitReport) -> None:
    from dcpsim.cost_models.profile_table import ATTENTION_OPS, row_size, row_tflops

    att = profile[profile["op"].isin(ATTENTION_OPS)]
    x = np.geomspace(max(row_size(att).min() / 2, 16), row_size(att).max() * 2, 200)
    for i, (key, curve) in enumerate(report.groups.items()):
        kernel, op, causal, d = key
        g = att[(att["kernel"] == kernel) & (att["op"] == op) & (att["causal"] == causal)
                & (att["head_dim"] == d)]
        color = f"C{i % 10}"
        label = f"{kernel or '-'} {op[5:]} {'causal' if causal else 'full'} d{d}"
        ax.plot(row_size(g), row_tflops(g), "o", color=color, ms=4, label=label)
        ax.plot(x, curve.tflops(x), "-", color=color, lw=0.8)
    ax.plot(x, cal.attn_fwd.tflops(x), "k-", lw=2.2, label="calibration attn_fwd (causal)")
    ax.plot(x, cal.attn_bwd.tflops(x), "k--", lw=2.2,
            label=f"calibration attn_bwd ({report.term('attn_bwd').how})")
    ax.set(xscale="log", xlabel="block length (tokens)", ylabel="TFLOP/s",
           title="attention: measured vs fitted")
    ax.legend(fontsize=6, ncol=2)


def _plot_collectives(ax, profile: pd.DataFrame, cal: Calibration) -> None:
    from dcpsim.cost_models.fitting import factor_and_hops
    from dcpsim.cost_models.profile_table import COMPUTE_OPS

    coll = profile[~profile["op"].isin(COMPUTE_OPS)]
    for i, ((op, link, n), g) in enumerate(coll.groupby(["op", "link", "group_size"], sort=True)):
        nbytes = g["bytes"].to_numpy(np.float64)
        factor, _ = factor_and_hops(op, np.full_like(nbytes, n))
        color = f"C{i % 10}"
        ax.plot(nbytes, nbytes * factor / g["seconds"].to_numpy() / 1e9, "o", color=color, ms=4,
                label=f"{op} {link} n={n}")
        xs = np.geomspace(nbytes.min(), nbytes.max(), 100)
        lm = cal.link(op, link)
        ax.plot(xs, xs * factor[0] / lm.seconds(op, xs, n) / 1e9, "-", color=color, lw=0.8)
    ax.set(xscale="log", xlabel="bytes (nccl-tests size)", ylabel="bus bandwidth (GB/s)",
           title="collectives: measured (points) vs α–β fit (lines)")
    ax.legend(fontsize=6, ncol=2)
