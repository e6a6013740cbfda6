"""A calibration fit as terminal text (:func:`report_text`) and as a plot of measured points against fitted
curves (:func:`write_plot`, matplotlib's object API: the global backend is left alone)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.calibration import Calibration
from dcpsim.cost_models.errors import CalibrationError

if TYPE_CHECKING:  # pandas loads in the functions
    import pandas as pd

    from dcpsim.cost_models.fitting import FitReport


def _fmt_params(params: dict[str, float]) -> str:
    if "peak_tflops" in params:
        return f"peak {params['peak_tflops']:.1f} TFLOP/s, half {params['half']:.0f} tokens"
    if "seconds" in params:
        return f"{params['seconds'] * 1e6:.1f} us per layer per microbatch"
    return (f"base {params['base_s'] * 1e6:.2f} us, hop {params['hop_s'] * 1e6:.2f} us, "
            f"busbw {params['busbw_gbs']:.1f} GB/s")


def report_text(report: FitReport) -> str:
    """Fitted terms with their errors, then the leave-one-out medians per kernel."""
    from dcpsim.experiments.output.tables import format_table

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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from dcpsim.cost_models.profile_table import ATTENTION_OPS, COMPUTE_OPS, row_size, row_tflops

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


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")


def _series_style(i: int) -> tuple[tuple[float, float, float, float], str]:
    """Colour and marker of series ``i``: tab20's 20 colours and 9 markers, so the first 180 series differ
    (the default cycle repeats its 10 colours, and a profile has 15 or more attention groups)."""
    from matplotlib import colormaps

    return colormaps["tab20"](i % 20), MARKERS[i % len(MARKERS)]


def _plot_attention(ax, profile: pd.DataFrame, cal: Calibration, report: FitReport) -> None:
    from dcpsim.cost_models.profile_table import ATTENTION_OPS, row_size, row_tflops

    att = profile[profile["op"].isin(ATTENTION_OPS)]
    x = np.geomspace(max(row_size(att).min() / 2, 16), row_size(att).max() * 2, 200)
    for i, (key, curve) in enumerate(report.groups.items()):
        kernel, op, causal, d = key
        g = att[(att["kernel"] == kernel) & (att["op"] == op) & (att["causal"] == causal)
                & (att["head_dim"] == d)]
        color, marker = _series_style(i)
        label = f"{kernel or '-'} {op[5:]} {'causal' if causal else 'full'} d{d}"
        ax.plot(row_size(g), row_tflops(g), marker, color=color, ms=4, label=label, linestyle="none")
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
        color, marker = _series_style(i)
        ax.plot(nbytes, nbytes * factor / g["seconds"].to_numpy() / 1e9, marker, color=color, ms=4,
                label=f"{op} {link} n={n}", linestyle="none")
        xs = np.geomspace(nbytes.min(), nbytes.max(), 100)
        lm = cal.link(op, link)
        ax.plot(xs, xs * factor[0] / lm.seconds(op, xs, n) / 1e9, "-", color=color, lw=0.8)
    ax.set(xscale="log", xlabel="bytes (nccl-tests size)", ylabel="bus bandwidth (GB/s)",
           title="collectives: measured (points) vs α–β fit (lines)")
    ax.legend(fontsize=6, ncol=2)
