"""The validation plot: predicted against measured times, log-log (matplotlib's object API: the global
backend is left alone)."""

from __future__ import annotations

from typing import Any

import numpy as np


def write_plot(results: dict[str, Any], path: str) -> None:
    """Two panels, log-log: rank-microbatch compute and microbatch / iteration times, predicted vs measured."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6))  # object API: the global backend is left alone
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    lo, hi = np.inf, 0.0
    for i, (label, r) in enumerate(results.items()):
        color = f"C{i % 10}"
        rm = pd.concat([it["rank_microbatch"] for it in r["iterations"]])
        mb = pd.concat([it["microbatch"] for it in r["iterations"]])
        axes[0].scatter(rm["compute_s_meas"] * 1e3, rm["compute_s_pred"] * 1e3, s=12, color=color, label=label)
        axes[1].scatter(mb["measured_s"] * 1e3, mb["predicted_s"] * 1e3, s=14, color=color, marker="o",
                        label=f"{label} microbatch")
        it_m = np.array([it["measured_s"] for it in r["iterations"]]) * 1e3
        it_p = np.array([it["predicted_s"] for it in r["iterations"]]) * 1e3
        axes[1].scatter(it_m, it_p, s=60, color=color, marker="*", label=f"{label} iteration")
        vals = np.concatenate([rm["compute_s_meas"] * 1e3, rm["compute_s_pred"] * 1e3, it_m, it_p])
        vals = vals[vals > 0]
        if vals.size:
            lo, hi = min(lo, vals.min()), max(hi, vals.max())
    for ax, title in zip(axes, ("rank-microbatch compute (F + B)", "microbatch max and iteration time")):
        if hi > 0:
            ax.plot([lo / 2, hi * 2], [lo / 2, hi * 2], "k--", lw=0.8, label="simulated = measured")
        ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="simulated (ms)", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
