"""Figure (f): each policy's speedup over the baseline against cluster size (weak scaling).

The base scenario's pool W is scaled (TP, PP, model and trace fixed) and its global batch grows with it, so
the tokens per rank stay constant: from the prod-2048-256k layout (TP 8, PP 8), pools 16 ... 176 span 1,024 to
11,264 GPUs. The left panel shows the speedup over the baseline, the right one the throughput per GPU. Each
point runs ``common.SEEDS`` trace seeds (``common.trace_seeds``): the line is the mean, the shaded band the
min–max over the seeds (a speedup is taken per seed, against the baseline on the same trace).
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

KEY = "f"
STEM = "f_speedup_vs_cluster_size"
TITLE = "speedup against cluster size"
DEFAULT_SCENARIOS = ("prod-2048-256k",)
FACTORS, QUICK_FACTORS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.5), (0.5, 1.0, 2.0)
POINT = ("policy", "num_gpus")  # the columns naming one point; its rows differ by seed


def pools_for(base: Scenario, quick: bool) -> list[int]:
    return sorted({max(1, round(base.pool * f)) for f in (QUICK_FACTORS if quick else FACTORS)})


def collect(ctx: FigureContext, base: Scenario) -> pd.DataFrame:
    rows = []
    specs = ctx.specs(base)
    for w in pools_for(base, ctx.quick):
        tokens = round(base.global_batch_tokens * w / base.pool)
        for seed in trace_seeds(ctx, base):
            sc = base.with_(pool=w, global_batch_tokens=tokens, seed=seed, name=f"{base.name}@W{w}")
            ctx.log(f"(f) pool {w}: {sc.num_gpus:,} GPUs, {human_tokens(tokens)} tokens/batch, seed {seed}")
            for spec in specs:
                res = ctx.try_run(sc, spec)
                rows.append({"scenario": base.name, "pool": w, "num_gpus": sc.num_gpus,
                             "global_batch_tokens": tokens, "seed": seed, "policy": spec.label,
                             **metrics_row(res, sc.num_gpus)})
    df = pd.DataFrame(rows)
    base_label = baseline_of([s.label for s in specs])
    ref = df[df.policy == base_label].set_index(["num_gpus", "seed"])["tokens_per_s"]
    keys = pd.MultiIndex.from_frame(df[["num_gpus", "seed"]])
    df["baseline"] = base_label
    df["speedup"] = df["tokens_per_s"].to_numpy() / ref.reindex(keys).to_numpy()
    return with_spread(df, POINT, ["speedup", "tokens_per_s_per_gpu"])


def plot(df: pd.DataFrame, base: Scenario) -> Figure:
    policies = list(dict.fromkeys(df.policy))
    base_label = str(df.baseline.iloc[0])
    gpus = sorted(df[df.ok].num_gpus.unique()) or sorted(df.num_gpus.unique())
    note = seeds_note(df)
    all_gpus = sorted(df.num_gpus.unique())
    speed, tput = over_seeds(df, POINT, "speedup"), over_seeds(df, POINT, "tokens_per_s_per_gpu")
    fig = new_figure(figsize=(11, 4.3))
    ax, ax2 = fig.subplots(1, 2)
    for pol in policies:
        colour = policy_colour(pol, policies)
        style = "--" if pol == base_label else "-"
        for a, st in ((ax, speed), (ax2, tput)):
            d = st.loc[pol].reindex(all_gpus)
            a.plot(all_gpus, d["mean"], style, marker="o", color=colour, label=pol)
            if note and not (a is ax and pol == base_label):  # the baseline's speedup is 1 on every seed
                a.fill_between(all_gpus, d["min"], d["max"], color=colour, alpha=0.18, linewidth=0)
        if pol != base_label:
            for x, y in zip(all_gpus, speed.loc[pol].reindex(all_gpus)["mean"]):
                if np.isfinite(y):
                    ax.annotate(f"{y:.2f}×", (x, y), textcoords="offset points", xytext=(0, 6), ha="center",
                                fontsize=7.5, color=colour)
    for a in (ax, ax2):
        a.set_xscale("log")
        a.set_xticks(gpus, [f"{int(g):,}" for g in gpus], rotation=30, fontsize=8)
        a.minorticks_off()
        a.set_xlabel("cluster size (GPUs)")
        a.grid(alpha=0.3)
    ax.margins(y=0.15)
    ax.set_ylabel(f"throughput speedup over {base_label} (×)")
    ax.set_title("speedup (labels: mean × over the baseline)" if note else "speedup (labels: × over the baseline)",
                 fontsize=9.5)
    ax2.set_ylabel("throughput (tokens/s per GPU)")
    ax2.set_ylim(0, None)
    ax2.set_title("throughput per GPU", fontsize=9.5)
    per_rank = base.global_batch_tokens / base.pool
    fig.suptitle(f"(f) Speedup against cluster size — weak scaling of {base.name}: {base.model}, TP{base.tp} "
                 f"PP{base.pp}, pool {min(df.pool)}–{max(df.pool)}, {per_rank / 1e3:,.0f}K tokens per rank "
                 f"per batch, context {base.context_len:,}"
                 + (f"\n{note.replace('whiskers', 'bands')}" if note else ""), fontsize=10)
    # one legend under both panels: inside an axis it covers points (mcore-dcp's at 1,024 GPUs)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, title="policy", fontsize=8, loc="lower center", ncol=len(policies),
               bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0.0, 0.1, 1.0, 1.0))
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    base = scenarios[0]
    df = collect(ctx, base)
    return save_figure(ctx, plot(df, base), STEM, df)
