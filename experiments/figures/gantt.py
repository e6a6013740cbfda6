"""Figure (e): one iteration's pipeline timeline (Gantt chart) per policy.

Rows are ranks (a few pool ranks of every pipeline stage, evenly spaced over the pool so that different CP
groups show), the x axis is time in the iteration.
Colours: forward and backward compute, exposed CP communication, exposed pipeline transfers ("pp wait"),
the DP wait before the gradient sync, the gradient sync, and the optimizer step; the light grey underneath
is idle time (pipeline bubble: warm-up, cool-down, waiting for CP-group peers or the other stages).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dcpsim.experiments.figures.common import Figure, FigureContext, new_figure, save_figure
from dcpsim.experiments.scenario.definition import Scenario
from dcpsim.sim.timeline import COLUMNS

KEY = "e"
STEM = "e_pipeline_timeline"
TITLE = "one iteration's pipeline timeline (Gantt) per policy"
DEFAULT_SCENARIOS = ("h100-512-256k",)
MAX_RANKS, QUICK_MAX_RANKS = 8, 4

CATEGORIES = {  # category → (legend label, colour)
    "F": ("forward compute", "#4c72b0"),
    "B": ("backward compute", "#55a868"),
    "cp": ("CP comm (exposed)", "#c44e52"),
    "pp": ("PP wait (exposed transfer)", "#8172b2"),
    "tp": ("TP comm (exposed)", "#dd8452"),
    "ep": ("EP all-to-all (MoE)", "#64b5cd"),
    "dp_wait": ("DP wait", "#e6b800"),
    "dp": ("gradient sync", "#222222"),
    "opt": ("optimizer step", "#8c564b"),
}
IDLE_COLOUR = "#e8e8e8"


def categorise(frame: pd.DataFrame) -> np.ndarray:
    """The category (a key of :data:`CATEGORIES`) of every timeline row."""
    kind, comm, phase = frame["kind"].to_numpy(), frame["comm"].to_numpy(), frame["phase"].to_numpy()
    return np.select([(kind == "compute") & (phase == "F"), (kind == "compute") & (phase == "B"),
                      kind == "compute", kind == "idle", comm == "cp", comm == "pp", comm == "dp", comm == "tp",
                      comm == "ep"],
                     ["F", "B", "opt", "dp_wait", "cp", "pp", "dp", "tp", "ep"], default="opt")


def shown_ranks(pool: int, k: int) -> np.ndarray:
    """``k`` pool ranks evenly spaced over ``0..pool-1`` (all of them when ``pool <= k``)."""
    if pool <= k:
        return np.arange(pool)
    return np.unique(np.round(np.linspace(0, pool - 1, k)).astype(int))


def collect(ctx: FigureContext, sc: Scenario) -> pd.DataFrame:
    ctx.log(f"(e) scenario {sc.name}")
    ranks = shown_ranks(sc.pool, QUICK_MAX_RANKS if ctx.quick else MAX_RANKS)
    frames = []
    for spec in ctx.specs(sc):
        res = ctx.try_run(sc, spec)
        if res is None:
            continue
        f = res.timeline.to_frame()
        f = f[np.isin(f["rank"].to_numpy(), ranks)].copy()
        f["row"] = f["stage"] * len(ranks) + np.searchsorted(ranks, f["rank"].to_numpy())
        f["category"] = categorise(f)
        f.insert(0, "policy", spec.label)
        f.insert(0, "scenario", sc.name)
        f["iteration_time_s"] = res.metrics.iteration_time_s
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["scenario", "policy", *COLUMNS, "row", "category", "iteration_time_s"])


def _panel(ax, d: pd.DataFrame, pp: int, ranks: int) -> None:
    T = float(d.iteration_time_s.iloc[0])
    row = d["row"].to_numpy()
    n_rows = pp * ranks
    ax.broken_barh([(0.0, T)] * 1, (-0.5, n_rows), color=IDLE_COLOUR, zorder=0)
    for cat, (_, colour) in CATEGORIES.items():
        sel = d["category"].to_numpy() == cat
        if not sel.any():
            continue
        starts, ends, rows = d["start"].to_numpy()[sel], d["end"].to_numpy()[sel], row[sel]
        for r in np.unique(rows):
            m = rows == r
            ax.broken_barh(list(zip(starts[m], ends[m] - starts[m])), (r - 0.42, 0.84), color=colour,
                           linewidth=0, zorder=2)
    for s in range(1, pp):
        ax.axhline(s * ranks - 0.5, color="black", linewidth=0.8, zorder=3)
    ax.set_yticks([s * ranks + (ranks - 1) / 2 for s in range(pp)], [f"stage {s}" for s in range(pp)],
                  fontsize=8)
    ax.set_yticks(np.arange(n_rows), minor=True)
    ax.tick_params(axis="y", which="minor", length=2)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_xlim(0, None)
    ax.grid(axis="x", alpha=0.3)


def plot(df: pd.DataFrame, sc: Scenario) -> Figure:
    policies = list(dict.fromkeys(df.policy)) or ["(none)"]
    shown = sorted(df["rank"].unique()) if len(df) else [0]
    ranks = len(shown)
    pp = sc.pp
    height = max(1.6, 0.085 * pp * ranks + 0.9)
    total = height * len(policies) + 1.0
    fig = new_figure(figsize=(12, total))
    axes = fig.subplots(len(policies), 1, sharex=True, squeeze=False)
    tmax = float(df.iteration_time_s.max()) if len(df) else 1.0
    for ax, pol in zip(axes[:, 0], policies):
        d = df[df.policy == pol]
        if len(d):
            _panel(ax, d, pp, ranks)
            ax.set_title(f"{pol}: iteration {float(d.iteration_time_s.iloc[0]):.2f} s, "
                         f"{int(d.microbatch.max()) + 1} microbatches", fontsize=9, loc="left")
        else:
            ax.set_title(f"{pol}: failed", fontsize=9, loc="left")
        ax.set_xlim(0, tmax * 1.01)
    axes[-1, 0].set_xlabel("time in the iteration (s)")
    which = ", ".join(str(int(r)) for r in shown) if ranks <= 8 else f"{ranks} ranks"
    fig.supylabel(f"pool ranks {which} (of {sc.pool}) at each stage", fontsize=9)
    from matplotlib.patches import Patch

    present = set(df["category"]) if len(df) else set(CATEGORIES)
    handles = [Patch(color=c, label=lab) for cat, (lab, c) in CATEGORIES.items() if cat in present] + [
        Patch(color=IDLE_COLOUR, label="idle (pipeline bubble)")]  # only what the panels show
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f"(e) One iteration's pipeline timeline per policy — {sc.name} ({sc.model}, {sc.num_gpus:,} "
                 f"GPUs, PP {sc.pp}, pool {sc.pool}, context {sc.context_len:,})", fontsize=10)
    fig.tight_layout(rect=(0, 0.55 / total, 1, 1))
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    sc = scenarios[0]
    df = collect(ctx, sc)
    return save_figure(ctx, plot(df, sc), STEM, df)
