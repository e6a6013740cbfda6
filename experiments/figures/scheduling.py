"""Figure (d): a policy's scheduling (planning) wall time against the number of sequences n and the pool size W.

The cells are those of the scheduler benchmark (``experiments/bench/scheduler.py``): n documents from the base
scenario's trace preset, a pool of W ranks, and a per-rank token budget set so that the batch needs about
eight microbatches on memory alone (so n and W change the problem size, not the microbatch count). The time
is that of ``policy.plan`` alone (no validation, no simulation), the best of up to three calls. When the
benchmark module is absent (or its functions changed), local equivalents below are used, on the base
scenario's model and GPU. Wall times depend on the machine; the shape (how time grows with n and W) is the point.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from dcpsim.experiments.figures.common import Figure, FigureContext, new_figure, policy_colour, save_figure
from dcpsim.experiments.runner import PolicySpec, build_policy
from dcpsim.experiments.scenario.definition import Scenario

KEY = "d"
STEM = "d_scheduling_time"
TITLE = "scheduling time against n and W per policy"
DEFAULT_SCENARIOS = ("h100-512-256k",)
N_GRID, QUICK_N_GRID = (512, 2048, 8192, 32768), (128, 512)
W_GRID, QUICK_W_GRID = (16, 64, 256, 1024), (8, 32)
FIXED_W, QUICK_FIXED_W = 256, 16
FIXED_N, QUICK_FIXED_N = 8192, 512
MICROBATCHES = 8


def local_case(base: Scenario, n: int, w: int, microbatches: int = MICROBATCHES):
    """(batch, job, cost model): n documents of the base trace, pool w, a budget for ~``microbatches``."""
    from dcpsim import traces
    from dcpsim.traces.batching import GlobalBatch

    lengths = traces.split_long(traces.get_preset(base.trace).sample(n, base.seed), base.context_len)[:n]
    budget = max(math.ceil(lengths.sum() / (w * microbatches)), math.ceil(lengths.max() / w))
    sc = base.with_(pool=w, global_batch_tokens=int(lengths.sum()), max_tokens_per_rank=int(budget))
    return GlobalBatch(np.arange(len(lengths), dtype=np.int64), lengths, 0), sc.job(), sc.cost_model()


def time_plan(spec: PolicySpec, batch, job, cost_model, repeats: int = 3, enough_s: float = 0.5) -> float:
    """Best-of wall time (seconds) of ``spec``'s planning of ``batch``; stops repeating once a call is slow."""
    policy = build_policy(spec)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        policy.plan(batch, job, cost_model)
        t = time.perf_counter() - t0
        best = min(best, t)
        if t >= enough_s:
            break
    return best


def case_maker(base: Scenario):
    """The benchmark's ``make_case`` when it is there and works, else :func:`local_case`; and its source."""
    try:
        from dcpsim.experiments.bench.scheduler import make_case

        make_case(64, 16, base.trace, base.seed, MICROBATCHES)
        return (lambda n, w: make_case(n, w, base.trace, base.seed, MICROBATCHES)), "bench_scheduler"
    except Exception:  # noqa: BLE001 — absent, renamed or failing: use the local cases
        return (lambda n, w: local_case(base, n, w)), "local"


def collect(ctx: FigureContext, base: Scenario) -> pd.DataFrame:
    n_grid = QUICK_N_GRID if ctx.quick else N_GRID
    w_grid = QUICK_W_GRID if ctx.quick else W_GRID
    fixed_n = QUICK_FIXED_N if ctx.quick else FIXED_N
    fixed_w = QUICK_FIXED_W if ctx.quick else FIXED_W
    make_case, source = case_maker(base)
    points = [("n", n, fixed_w) for n in n_grid] + [("W", fixed_n, w) for w in w_grid]
    rows = []
    for sweep, n, w in points:
        batch, job, cm = make_case(n, w)
        ctx.log(f"(d) {sweep}-sweep: n={n:,} W={w} (cases: {source})")
        for spec in ctx.specs(base):
            try:
                secs, err = time_plan(spec, batch, job, cm), ""
            except Exception as e:  # noqa: BLE001 — e.g. a job that cannot hold the batch: a gap, not a failure
                secs, err = float("nan"), f"{type(e).__name__}: {e}"
                ctx.log(f"  {spec.label}: FAILED ({err})")
            rows.append({"trace": base.trace, "seed": base.seed, "sweep": sweep, "n": n, "W": w, "policy": spec.label,
                         "model": job.model.name, "gpu": job.gpu.name, "max_tokens_per_rank": job.max_tokens_per_rank,
                         "cases": source, "scheduling_time_s": secs, "error": err})
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, base: Scenario) -> Figure:
    policies = list(dict.fromkeys(df.policy))
    fig = new_figure(figsize=(10, 4.2))
    axes = fig.subplots(1, 2)
    for ax, sweep, xcol, xlabel in ((axes[0], "n", "n", "sequences in the global batch, n"),
                                    (axes[1], "W", "W", "pool size W (ranks per stage)")):
        d = df[df.sweep == sweep]
        for pol in policies:
            e = d[d.policy == pol].sort_values(xcol)
            ax.plot(e[xcol], e.scheduling_time_s * 1e3, marker="o", label=pol, color=policy_colour(pol, policies))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # 1-2-5 labelled ticks per decade (a span under one decade still gets several), unlabelled minor ones
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(sorted(d[xcol].unique()), [f"{int(v):,}" for v in sorted(d[xcol].unique())])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("scheduling wall time (ms, log)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(title="policy", fontsize=8)
        fixed = f"W = {int(d.W.iloc[0])}" if sweep == "n" else f"n = {int(d.n.iloc[0]):,}"
        ax.set_title(f"against {'n' if sweep == 'n' else 'W'} ({fixed})", fontsize=9.5)
    fig.suptitle(f"(d) Scheduling time per policy — trace {base.trace}, {df.model.iloc[0]} on "
                 f"{df.gpu.iloc[0].upper()} (the job that ran), budget for ~{MICROBATCHES} microbatches; one "
                 "planning call (best of ≤ 3), one CPU core", fontsize=10)
    fig.tight_layout()
    return fig


def make(ctx: FigureContext, scenarios: list[Scenario]) -> list[Path]:
    base = scenarios[0]
    df = collect(ctx, base)
    return save_figure(ctx, plot(df, base), STEM, df)
