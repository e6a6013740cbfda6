"""Figure (b): pipeline bubble and data-parallel bubble per policy, for each scenario.

Bars are the mean over ranks (docs/metrics.md): the pipeline bubble (solid) stacked under the DP bubble
(hatched), the total written on top of each bar; a black tick marks the largest pipeline bubble of any rank.
Each bar runs ``common.SEEDS`` trace seeds (``common.trace_seeds``): its parts and tick are the means over the
seeds, its whisker the min–max of the total, the label the mean total just above the whisker.
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
    over_seeds,
    policy_colour,
    save_figure,
    seeds_note,
    trace_seeds,
    with_spread,
)
from dcpsim.experiments.scenario.definition import Scenario

KEY = "b"
STEM = "b_bubbles"
TITLE = "pipeline and DP bubble per policy"
DEFAULT_SCENARIOS = ("h100-512-32k", "h100-512-256k", "prod-2048-256k", "prod-11264-256k")
POINT = ("scenario", "policy")  # the columns naming one bar; its rows differ by seed
PLOTTED = ("pipeline_bubble", "dp_bubble", "bubble_total", "pipeline_bubble_max")


def collect(ctx: FigureContext, scenarios: list[Scenario]) -> pd.DataFrame:
    rows = []
    for sc in scenarios:
        for seed in trace_seeds(ctx, sc):
            ctx.log(f"(b) scenario {sc.name}, seed {seed}")
            point = sc.with_(seed=seed)
            for spec in ctx.specs(point):
                res = ctx.try_run(point, spec)
                rows.append({"scenario": sc.name, "num_gpus": sc.num_gpus, "seed": seed, "policy": spec.label,
                             **metrics_row(res, sc.num_gpus)})
    df = pd.DataFrame(rows)
    df["bubble_total"] = df.pipeline_bubble + df.dp_bubble
    return with_spread(df, POINT, PLOTTED)


def plot(df: pd.DataFrame) -> Figure:
    scenarios = list(dict.fromkeys(df.scenario))
    policies = list(dict.fromkeys(df.policy))
    fig = new_figure(figsize=(2.3 * len(scenarios) + 2.5, 4.6))
    ax = fig.subplots()
    x = np.arange(len(scenarios))
    width = 0.8 / len(policies)
    note = seeds_note(df)
    stats = {c: over_seeds(df, POINT, c) * 100 for c in PLOTTED}
    for i, pol in enumerate(policies):
        at = pd.MultiIndex.from_product([scenarios, [pol]])
        pp, dp, total, tick = (stats[c].reindex(at) for c in PLOTTED)
        xs = x + (i - (len(policies) - 1) / 2) * width
        colour = policy_colour(pol, policies)
        ax.bar(xs, pp["mean"], width, color=colour, edgecolor="black", linewidth=0.4, label=pol)
        ax.bar(xs, dp["mean"], width, bottom=pp["mean"], color=colour, alpha=0.45, hatch="///", edgecolor="black",
               linewidth=0.4)
        # the stacked parts' means add up to the total's mean, where the whisker starts
        top = (pp["mean"] + dp["mean"]).to_numpy()
        if note:
            ax.errorbar(xs, top, yerr=[top - total["min"].to_numpy(), total["max"].to_numpy() - top], fmt="none",
                        ecolor="black", elinewidth=0.9, capsize=2.5, zorder=3)
        # the worst rank's pipeline bubble: a white diamond, unlike the whisker's caps
        ax.scatter(xs, tick["mean"].to_numpy(), marker="D", s=18, facecolor="white", edgecolor="black",
                   linewidth=0.9, zorder=4)
        for xi, t, hi, tk in zip(xs, top, total["max"].to_numpy(), tick["mean"].to_numpy()):
            if np.isfinite(t):   # the total's label above its whisker and the max-rank diamond
                ax.text(xi, np.nanmax([hi, tk]) + 1.0, f"{t:.0f}%", ha="center", va="bottom", fontsize=7, zorder=4,
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
                Line2D([], [], marker="D", markerfacecolor="white", markeredgecolor="black", linestyle="none",
                       markersize=5, label="pipeline bubble (max rank)")]
    ax.legend(handles=handles, fontsize=7.5, loc="upper left", ncol=2)
    ax.set_title("(b) Pipeline and data-parallel bubbles per policy (one iteration; labels: total"
                 + (f"; {note} of the total)" if note else ")"), fontsize=10)
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    df = collect(ctx, scenarios)
    return save_figure(ctx, plot(df), STEM, df)
