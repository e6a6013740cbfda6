"""Figure (h): throughput against straggler severity, per policy (what-if: slow GPUs; cost_models.stragglers).

Two straggler models, one panel each, the slow-down factor f on the x axis (1 = no straggler):

* **one slow rank**: pool rank 1 of the middle pipeline stage (``s{p//2}r1=f``) computes f times slower;
* **random stragglers**: a fraction ``RANDOM_FRACTION`` of all (stage, rank) slots, drawn from the point's
  seed, each f times slower (``fraction=0.05,slowdown=fixed:f,seed=…``).

A CP group runs at its slowest member's pace, so a slow rank slows every group it belongs to; policies that
read per-rank speeds (HyDra) put less work on it. One iteration per point, tokens/s/GPU on the y axis. Each
point runs ``common.SEEDS`` seeds (``common.trace_seeds``): the seed draws the trace and the random
stragglers; the line is the mean, the shaded band the min–max over the seeds.
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

KEY = "h"
STEM = "h_stragglers"
TITLE = "throughput against straggler severity per policy"
DEFAULT_SCENARIOS = ("h100-512-32k",)
FACTORS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0)  # slow-down factors swept (a what-if grid, not measured values)
QUICK_FACTORS = (1.0, 1.5, 3.0)
RANDOM_FRACTION = 0.05  # of the (stage, rank) slots: round(0.05 · p · W) stragglers
POINT = ("model", "policy", "factor")  # the columns naming one point; its rows differ by seed


def models(sc: Scenario, f: float) -> dict[str, dict[str, str]]:
    """The scenario fields of each straggler model at factor ``f``."""
    if f == 1.0:
        none = {"slow_ranks": "", "stragglers": ""}
        return {"one slow rank": none, "random stragglers": none}
    rank = min(1, sc.pool - 1)
    return {"one slow rank": {"slow_ranks": f"s{sc.pp // 2}r{rank}={f:g}", "stragglers": ""},
            "random stragglers": {"slow_ranks": "",
                                  "stragglers": f"fraction={RANDOM_FRACTION:g},slowdown=fixed:{f:g},seed={sc.seed}"}}


def collect(ctx: FigureContext, scenarios: list[Scenario]) -> pd.DataFrame:
    base = scenarios[0]
    rows = []
    for f in QUICK_FACTORS if ctx.quick else FACTORS:
        for seed in trace_seeds(ctx, base):
            ctx.log(f"(h) {base.name} slow-down {f:g}, seed {seed}")
            sc = base.with_(seed=seed)
            for model, fields in models(sc, f).items():
                point = sc.with_(**fields)
                for spec in ctx.specs(point):
                    res = ctx.try_run(point, spec)
                    rows.append({"scenario": sc.name, "model": model, "factor": f, "seed": seed, **fields,
                                 "policy": spec.label, **metrics_row(res, sc.num_gpus)})
    return with_spread(pd.DataFrame(rows), POINT, ["tokens_per_s_per_gpu"])


def plot(df: pd.DataFrame, sc: Scenario) -> Figure:
    policies = list(dict.fromkeys(df.policy))
    model_names = list(dict.fromkeys(df.model))
    fig = new_figure(figsize=(5.2 * len(model_names), 4.2))
    axes = np.atleast_1d(fig.subplots(1, len(model_names), sharey=True))
    note = seeds_note(df)
    tput = over_seeds(df, POINT, "tokens_per_s_per_gpu")
    factors = sorted(df.factor.unique())
    seeds = sorted(df.seed.unique()) if "seed" in df else [sc.seed]
    for ax, model in zip(axes, model_names):
        for pol in policies:
            d = tput.reindex(pd.MultiIndex.from_product([[model], [pol], factors]))
            colour = policy_colour(pol, policies)
            ax.plot(factors, d["mean"].to_numpy(), marker="o", label=pol, color=colour)
            if note:
                ax.fill_between(factors, d["min"].to_numpy(), d["max"].to_numpy(), color=colour, alpha=0.18,
                                linewidth=0)
        ax.set_xlabel("slow-down factor f of the stragglers' compute (1 = none)")
        ax.set_title(f"one slow rank (stage {sc.pp // 2}, pool rank {min(1, sc.pool - 1)})" if model == "one slow rank"
                     else f"random stragglers ({RANDOM_FRACTION:.0%} of the {sc.pp * sc.pool:,} stage-ranks, "
                          f"seed{'s' if len(seeds) > 1 else ''} {', '.join(str(int(x)) for x in seeds)})", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, None)   # from 0: the drop with f reads as a share of the throughput
    axes[0].set_ylabel("throughput, tokens/s/GPU")
    axes[0].legend(title="policy", fontsize=8)
    fig.suptitle(f"(h) Throughput against straggler severity: {sc.name} ({sc.num_gpus:,} GPUs); "
                 "one iteration per point" + (f" ({note.replace('whiskers', 'bands')})" if note else ""),
                 fontsize=9.5)
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    df = collect(ctx, scenarios)
    return save_figure(ctx, plot(df, scenarios[0]), STEM, df)
