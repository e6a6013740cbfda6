"""Figure (g): efficiency = lower bound ÷ iteration time, per policy per scenario.

The bound (sim.bound, docs/bound.md) is what no valid plan of the batch can beat under the scenario's cost
model, so 1.0 would be a provably optimal plan and 1 − efficiency is at most the headroom left. Each scenario
runs its own policies plus the literature's schedulers (common.LITERATURE_POLICIES). Each bar runs
``common.SEEDS`` trace seeds (``common.trace_seeds``; the bound is each seed's batch's own): the bar is the mean
efficiency, its whisker the min–max over the seeds, its label the mean.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dcpsim.experiments.figures.common import (
    LITERATURE_POLICIES,
    Figure,
    FigureContext,
    human_tokens,
    metrics_row,
    new_figure,
    over_seeds,
    policy_colour,
    save_figure,
    seeds_note,
    trace_seeds,
    with_spread,
)
from dcpsim.experiments.runner import parse_policy_specs
from dcpsim.experiments.scenario.definition import Scenario

KEY = "g"
STEM = "g_efficiency"
TITLE = "efficiency (bound ÷ iteration time) per policy per scenario"
DEFAULT_SCENARIOS = ("h100-512-32k", "h100-512-256k", "prod-2048-256k", "prod-11264-256k")
POINT = ("scenario", "policy")  # the columns naming one bar; its rows differ by seed


def collect(ctx: FigureContext, scenarios: list[Scenario]) -> pd.DataFrame:
    rows = []
    for sc in scenarios:
        labels = list(dict.fromkeys([*sc.policies, *LITERATURE_POLICIES]))
        for seed in trace_seeds(ctx, sc):
            ctx.log(f"(g) {sc.name}, seed {seed}")
            point = sc.with_(seed=seed)
            for spec in parse_policy_specs(",".join(labels)):
                res = ctx.try_run(point, spec)
                rows.append({"scenario": sc.name, "seed": seed, "policy": spec.label,
                             **metrics_row(res, sc.num_gpus)})
    return with_spread(pd.DataFrame(rows), POINT, ["efficiency"])


def plot(df: pd.DataFrame, scenarios: list[Scenario]) -> Figure:
    policies = list(dict.fromkeys(df.policy))
    names = [sc.name for sc in scenarios]
    fig = new_figure(figsize=(2.2 * len(names) + 3.0, 4.6))
    ax = fig.subplots()
    x = np.arange(len(names))
    width = 0.8 / max(len(policies), 1)
    note = seeds_note(df)
    eff = over_seeds(df, POINT, "efficiency")
    for i, pol in enumerate(policies):
        d = eff.reindex(pd.MultiIndex.from_product([names, [pol]]))
        xs = x + (i - (len(policies) - 1) / 2) * width
        ax.bar(xs, d["mean"], width, label=pol, color=policy_colour(pol, policies), edgecolor="black",
               linewidth=0.4)
        if note:
            ax.errorbar(xs, d["mean"], yerr=[d["mean"] - d["min"], d["max"] - d["mean"]], fmt="none",
                        ecolor="black", elinewidth=0.8, capsize=1.5)
        for xi, v, hi in zip(xs, d["mean"], d["max"]):
            if np.isfinite(v):
                ax.text(xi, hi + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=6.5, rotation=90, zorder=4,
                        bbox={"boxstyle": "square,pad=0.05", "facecolor": "white", "edgecolor": "none",
                              "alpha": 0.85})   # legible where it reaches the dashed 1.0 line
            else:
                ax.text(xi, 0.02, "failed", ha="center", va="bottom", fontsize=6.5, rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(x, [f"{sc.name}\n{sc.num_gpus:,} GPUs, {human_tokens(sc.context_len)}" for sc in scenarios],
                  fontsize=8)
    ax.set_ylabel("efficiency = lower bound ÷ iteration time")
    ax.set_ylim(0, 1.4)  # room for the legend above the 1.0 line
    ax.grid(axis="y", alpha=0.3)
    ax.legend(title="policy", fontsize=7.5, loc="upper center", ncol=min(4, len(policies)))
    ax.set_title("(g) Efficiency per policy: the iteration-time lower bound (docs/bound.md) over each policy's "
                 "simulated time\n(1.0 = provably optimal; one iteration per scenario"
                 + (f"; {note})" if note else ")"), fontsize=9.5)
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    df = collect(ctx, scenarios)
    return save_figure(ctx, plot(df, scenarios), STEM, df)
