"""Figure (c): per-rank tokens against per-rank microbatch time, one panel per policy.

One point per (rank, microbatch) at pipeline stage 0: the tokens the rank holds (Σ L / degree of its
sequences) and its compute time (forward + backward). Memory-driven CP degrees put ranks with the same token
count at very different times (quadratic attention); a load-driven policy collapses the cloud onto one time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dcpsim.experiments.figures.common import Figure, FigureContext, new_figure, policy_colour, save_figure
from dcpsim.experiments.scenario.definition import Scenario
from dcpsim.sim.metrics import equal_tokens_time_ratio, rank_microbatch_table

KEY = "c"
STEM = "c_tokens_vs_time"
TITLE = "per-rank tokens against microbatch time, per policy"
DEFAULT_SCENARIOS = ("prod-2048-256k",)


def collect(ctx: FigureContext, sc: Scenario) -> pd.DataFrame:
    ctx.log(f"(c) scenario {sc.name}")
    frames = []
    for spec in ctx.specs(sc):
        res = ctx.try_run(sc, spec)
        if res is None:
            continue
        t = rank_microbatch_table(res.timeline)
        t = t[t.stage == 0].copy()
        t.insert(0, "policy", spec.label)
        t.insert(0, "scenario", sc.name)
        frames.append(t)
    cols = ["scenario", "policy", "stage", "rank", "microbatch", "tokens", "compute_s"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def plot(df: pd.DataFrame, sc: Scenario, figure_label: str = "(c) ") -> Figure:
    """The panels; ``figure_label`` starts the title (``dcpsim skew`` draws the plot on its own, without it)."""
    from matplotlib.ticker import MaxNLocator

    policies = list(dict.fromkeys(df.policy)) or ["(none)"]
    fig = new_figure(figsize=(4.4 * len(policies) + 0.8, 4.6), layout="constrained")
    axes = fig.subplots(1, len(policies), sharex=True, sharey=True, squeeze=False)
    for ax, pol in zip(axes[0], policies):
        d = df[df.policy == pol]
        if len(d):
            ratio, _ = equal_tokens_time_ratio(d[["tokens", "compute_s"]])
            sp = ax.scatter(d.tokens / 1e3, d.compute_s * 1e3, c=d.microbatch, cmap="viridis", s=9, alpha=0.75,
                            edgecolors="none", vmin=0, vmax=max(int(df.microbatch.max()), 1))  # one colour scale
            t = d.compute_s.to_numpy()
            ax.set_title(f"{pol} ({d.microbatch.nunique()} microbatches)\n"
                         f"max/median time {t.max() / np.median(t):.2f}×; ±10%-tokens ratio {ratio:.2f}×",
                         fontsize=8.5, color=policy_colour(pol, policies))
        else:
            sp = None
            ax.set_title(f"{pol}: failed", fontsize=9)
        ax.set_xlabel("tokens on the rank (thousands)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("microbatch time on the rank, F + B compute (ms)")
    if sp is not None:
        fig.colorbar(sp, ax=list(axes[0]), label="microbatch index", pad=0.01,
                     ticks=MaxNLocator(integer=True))   # microbatches are counted: integer ticks
    fig.suptitle(f"{figure_label}Per-rank tokens against microbatch time (one point per rank and microbatch, stage 0)\n"
                 f"{sc.name}: {sc.model}, {sc.num_gpus:,} GPUs, pool {sc.pool}, context {sc.context_len:,}",
                 fontsize=10)
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    sc = scenarios[0]
    df = collect(ctx, sc)
    return save_figure(ctx, plot(df, sc), STEM, df)
