"""Figure (a): throughput per policy against context length, with each policy's speedup over the baseline.

The base scenario's trace is cut at each context length (documents longer than the window become
window-sized pieces, so every point trains on the same tokens); everything else stays fixed. Each point runs
``common.SEEDS`` trace seeds (``common.trace_seeds``): a bar is the mean, its whisker the min–max over the
seeds, its label the mean of the per-seed speedups; the CSV has one row per seed and the spread columns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dcpsim.experiments.figures.common import (
    Figure,
    FigureContext,
    baseline_of,
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
from dcpsim.experiments.scenario.definition import Scenario

KEY = "a"
STEM = "a_throughput_vs_context"
TITLE = "throughput per policy against context length"
DEFAULT_SCENARIOS = ("h100-512-256k",)
CONTEXTS = (32768, 65536, 131072, 262144)
QUICK_CONTEXTS = (32768, 262144)


POINT = ("policy", "context_len")  # the columns naming one bar; its rows differ by seed


def contexts_for(sc: Scenario, quick: bool) -> list[int]:
    """32K..256K, or, for a base scenario whose context is below 32K, its context and two halvings."""
    grid = QUICK_CONTEXTS if quick else CONTEXTS
    if sc.context_len < grid[0]:
        c = sc.context_len
        return [c // 4, c] if quick else [c // 4, c // 2, c]
    return list(grid)


def collect(ctx: FigureContext, base: Scenario) -> pd.DataFrame:
    rows = []
    specs = ctx.specs(base)
    seeds = trace_seeds(ctx, base)
    for c in contexts_for(base, ctx.quick):
        for seed in seeds:
            sc = base.with_(context_len=c, seed=seed, name=f"{base.name}@{human_tokens(c)}")
            ctx.log(f"(a) context {human_tokens(c)}, seed {seed}")
            for spec in specs:
                res = ctx.try_run(sc, spec)
                rows.append({"scenario": base.name, "context_len": c, "seed": seed, "policy": spec.label,
                             **metrics_row(res, sc.num_gpus)})
    df = pd.DataFrame(rows)
    base_label = baseline_of([s.label for s in specs])
    ref = df[df.policy == base_label].set_index(["context_len", "seed"])["tokens_per_s"]
    keys = pd.MultiIndex.from_frame(df[["context_len", "seed"]])
    speed_col = "speedup_vs_" + base_label.replace("-", "_")
    df[speed_col] = df["tokens_per_s"].to_numpy() / ref.reindex(keys).to_numpy()
    return with_spread(df, POINT, ["tokens_per_s_per_gpu", speed_col])


def plot(df: pd.DataFrame, base: Scenario) -> Figure:
    policies = list(dict.fromkeys(df.policy))
    contexts = sorted(df.context_len.unique())
    base_label = baseline_of(policies)
    speed_col = "speedup_vs_" + base_label.replace("-", "_")
    fig = new_figure(figsize=(1.9 * len(contexts) + 2.5, 4.6))
    ax = fig.subplots()
    x = np.arange(len(contexts))
    width = 0.8 / len(policies)
    top = np.nanmax(df.tokens_per_s_per_gpu.to_numpy()) if df.ok.any() else 1.0
    tput, speed = over_seeds(df, POINT, "tokens_per_s_per_gpu"), over_seeds(df, POINT, speed_col)
    note = seeds_note(df)
    for i, pol in enumerate(policies):
        d = tput.loc[pol].reindex(contexts)
        sp = speed.loc[pol].reindex(contexts)
        xs = x + (i - (len(policies) - 1) / 2) * width
        ax.bar(xs, d["mean"], width, label=pol, color=policy_colour(pol, policies),
               edgecolor="black", linewidth=0.4)
        if note:
            ax.errorbar(xs, d["mean"], yerr=[d["mean"] - d["min"], d["max"] - d["mean"]], fmt="none",
                        ecolor="black", elinewidth=0.9, capsize=2.5)
        for xi, v, s in zip(xs, d["max"], sp["mean"]):
            if np.isfinite(v):
                ax.text(xi, v + 0.01 * top, f"{s:.2f}×", ha="center", va="bottom", fontsize=7.5)
            else:
                ax.text(xi, 0.02 * top, "failed", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(x, [human_tokens(int(c)) for c in contexts])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("throughput (tokens/s per GPU)")
    ax.set_ylim(0, top * 1.25)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(title="policy", fontsize=8, loc="upper right")
    ax.set_title(f"(a) Throughput against context length — {base.name}\n{base.model} on {base.num_gpus:,} "
                 f"{base.gpu.upper()} (TP{base.tp} PP{base.pp} pool {base.pool}), "
                 f"{human_tokens(base.global_batch_tokens)} tokens/batch; labels: speedup over {base_label}"
                 + (f" ({note})" if note else ""),
                 fontsize=9.5)
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    base = scenarios[0]
    df = collect(ctx, base)
    return save_figure(ctx, plot(df, base), STEM, df)
