"""Figure (b): pipeline bubble and data-parallel bubble per policy, for each scenario.

Bars are the mean over ranks (docs/metrics.md): the pipeline bubble (solid) stacked under the DP bubble
(hatched), the total written on top of each bar; a black tick marks the largest pipeline bubble of any rank.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dcpsim.experiments.figures.common import (
    Figure,
    FigureContext,
    metrics_row,
    new_figure,
    policy_colour,
    save_figure,
)
from dcpsim.experiments.scenario.definition import Scenario

KEY = "b"
STEM = "b_bubbles"
TITLE = "pipeline and DP bubble per policy"
DEFAULT_SCENARIOS = ("h100-512-32k", "h100-512-256k", "prod-2048-256k", "prod-11264-256k")


def collect(ctx: FigureContext, scenarios: list[Scenario]) -> pd.DataFrame:
    rows = []
    for sc in scenarios:
        ctx.log(f"(b) scenario {sc.name}")
        for spec in ctx.specs(sc):
            res = ctx.try_run(sc, spec)
            rows.append({"scenario": sc.name, "num_gpus": sc.num_gpus, "policy": spec.label,
                         **metrics_row(res, sc.num_gpus)})
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame) -> Figure:
    scenarios = list(dict.fromkeys(df.scenario))
    policies = list(dict.fromkeys(df.policy))
    fig = new_figure(figsize=(2.3 * len(scenarios) + 2.5, 4.6))
    ax = fig.subplots()
    x = np.arange(len(scenarios))
    width = 0.8 / len(policies)
    for i, pol in enumerate(policies):
        d = df[df.policy == pol].set_index("scenario").reindex(scenarios)
        xs = x + (i - (len(policies) - 1) / 2) * width
        colour = policy_colour(pol, policies)
        pp, dp = d.pipeline_bubble.to_numpy() * 100, d.dp_bubble.to_numpy() * 100
        ax.bar(xs, pp, width, color=colour, edgecolor="black", linewidth=0.4, label=pol)
        ax.bar(xs, dp, width, bottom=pp, color=colour, alpha=0.45, hatch="///", edgecolor="black",
               linewidth=0.4)
        ax.scatter(xs, d.pipeline_bubble_max.to_numpy() * 100, marker="_", s=120, color="black", zorder=3)
        for xi, a, b in zip(xs, pp, dp):
            if np.isfinite(a):   # the total sits on its bar (the max-rank tick may be above or below it)
                ax.text(xi, a + b + 0.5, f"{a + b:.0f}%", ha="center", va="bottom", fontsize=7, zorder=4,
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
                              "alpha": 0.8})   # legible where the max-rank tick crosses it
    labels = [f"{s}\n({int(df[df.scenario == s].num_gpus.iloc[0]):,} GPUs)" for s in scenarios]
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("share of the iteration time (%)")
    ymax = np.nanmax(np.r_[(df.pipeline_bubble + df.dp_bubble).to_numpy(), df.pipeline_bubble_max.to_numpy()])
    ax.set_ylim(0, min(100.0, 100 * (ymax if np.isfinite(ymax) else 1.0) * 1.2 + 5))
    ax.grid(axis="y", alpha=0.3)
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Artist] = [Patch(facecolor=policy_colour(p, policies), edgecolor="black", label=p) for p in policies]
    handles += [Patch(facecolor="white", edgecolor="black", label="pipeline bubble (mean)"),
                Patch(facecolor="white", edgecolor="black", hatch="///", label="DP bubble (mean)"),
                Line2D([], [], color="black", marker="_", linestyle="none", markersize=10,
                       label="pipeline bubble (max rank)")]
    ax.legend(handles=handles, fontsize=7.5, loc="upper left", ncol=2)
    ax.set_title("(b) Pipeline and data-parallel bubbles per policy (one iteration; labels: total)",
                 fontsize=10)
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    df = collect(ctx, scenarios)
    return save_figure(ctx, plot(df), STEM, df)
