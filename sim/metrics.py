"""Metrics of one simulated (or measured) iteration (docs/metrics.md defines each).

Each metric is declared once, on its field of :class:`Metrics` (``sim.metric_spec``): its unit, how a run
aggregates it over iterations, and its column in ``dcpsim compare``. The run summary, the table, ``--json``,
sweep rows and figure rows are derived from :data:`METRICS`; adding a metric is adding its field here and its
value in :func:`compute_metrics`.

All per-rank quantities are indexed by (stage, pool rank). Bubbles are fractions of the iteration time.
:func:`rank_microbatch_sums` is the one per-(rank, microbatch) aggregation of a timeline, used by the
metrics here and by ``real_runtime.compare`` on measured timelines.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from dcpsim.sim.metric_spec import MAX, MEAN, SUM, Column, Metric, declarations, metric, ratio
from dcpsim.sim.timeline import Timeline


@dataclass(frozen=True)
class Metrics:
    """One iteration's metrics; a run's are the same type, each field aggregated as declared.

    Field order is the order of the table's columns, of ``--json``'s and the sweep's and figures' rows.
    """

    iteration_time_s: float = metric("s", MEAN, table=Column("iter s", "{:.2f}"))
    tokens: int = metric("tokens", SUM)  # of the global batch; a run: all its iterations'
    tokens_per_s_per_gpu: float = metric("tokens/s/GPU", ratio("tokens", "iteration_time_s", per_gpu=True),
                                         table=Column("tok/s/GPU", "{:,.0f}"))
    tokens_per_s: float = metric("tokens/s", ratio("tokens", "iteration_time_s"),
                                 table=Column("x first", "{:.2f}x", relative=True))
    mfu: float = metric("fraction", MEAN, table=Column("MFU", "{:.1%}"))
    pipeline_bubble: float = metric("fraction", MEAN, table=Column("PP bubble", "{:.1%}"))  # mean over ranks
    pipeline_bubble_max: float = metric("fraction", MAX)  # the largest rank's
    dp_bubble: float = metric("fraction", MEAN, table=Column("DP bubble", "{:.1%}"))  # mean over ranks
    dp_bubble_max: float = metric("fraction", MAX)
    # max over (stage, microbatch) of max/min per-rank compute time
    microbatch_skew_max: float = metric("ratio", MAX, table=Column("mb skew max", "{:.2f}"))
    microbatch_skew_mean: float = metric("ratio", MEAN)
    # max time ratio of two rank-microbatches with tokens within ±10%
    same_tokens_time_ratio: float = metric("ratio", MAX, table=Column("±10%-tok ratio", "{:.2f}"))
    cp_comm_s: float = metric("s", MEAN, table=Column("CP comm s", "{:.2f}"))  # exposed, mean per rank
    pp_comm_s: float = metric("s", MEAN)
    dp_comm_s: float = metric("s", MEAN)
    tp_comm_s: float = metric("s", MEAN)  # exposed TP (sequence-parallel) communication, mean per rank
    ep_comm_s: float = metric("s", MEAN)  # MoE expert-parallel all-to-alls (never hidden), mean per rank
    num_microbatches: float = metric("microbatches", MEAN, table=Column("mbs", "{:.0f}"))
    scheduling_time_s: float = metric("s", MEAN, table=Column("sched ms", "{:.1f}", scale=1e3), wall_clock=True)
    peak_memory_gib: float = metric("GiB", MAX, table=Column("peak GiB", "{:.1f}"))  # max over ranks
    # sim.bound: no valid plan of the batch runs faster (docs/bound.md); 0.0 where none was computed
    bound_s: float = metric("s", MEAN, table=Column("bound s", "{:.2f}"), default=0.0)
    efficiency: float = metric("fraction", ratio("bound_s", "iteration_time_s"), table=Column("eff", "{:.2f}"),
                               default=0.0)  # bound ÷ iteration time; a run: Σ bound / Σ time

    def to_dict(self) -> dict:
        return asdict(self)


METRICS: tuple[Metric, ...] = declarations(Metrics)
METRIC_NAMES: tuple[str, ...] = tuple(d.name for d in METRICS)


def per_rank_sums(tl: Timeline) -> dict[str, np.ndarray]:
    """Seconds per (stage·W + rank) of compute, exposed comm by kind, DP wait and sync."""
    n = tl.num_stages * tl.pool_size
    idx = tl["stage"].astype(np.int64) * tl.pool_size + tl["rank"]
    dur = tl.duration
    kind, comm = tl["kind"], tl["comm"]

    def total(mask: np.ndarray) -> np.ndarray:
        return np.bincount(idx[mask], weights=dur[mask], minlength=n)

    return {
        "compute": total(kind == "compute"),
        "cp": total((kind == "comm") & (comm == "cp")),
        "pp": total((kind == "comm") & (comm == "pp")),
        "dp": total((kind == "comm") & (comm == "dp")),
        "tp": total((kind == "comm") & (comm == "tp")),
        "ep": total((kind == "comm") & (comm == "ep")),
        "dp_wait": total(kind == "idle"),
    }


def rank_microbatch_sums(tl: Timeline) -> pd.DataFrame:
    """One row per (stage, rank, microbatch) the rank takes part in, sorted by them: the tokens it holds
    (Σ L / degree; the largest of its records'), its compute seconds and its exposed CP seconds, forward +
    backward. The one per-rank-microbatch aggregation, for simulated and measured timelines alike."""
    rows = np.asarray(tl["microbatch"]) >= 0
    stage = np.asarray(tl["stage"])[rows]
    rank = np.asarray(tl["rank"])[rows]
    mb = np.asarray(tl["microbatch"])[rows]
    cols = ("stage", "rank", "microbatch", "tokens", "compute_s", "cp_s")
    if not rows.any():
        return pd.DataFrame({c: np.zeros(0, dtype=np.float64 if c.endswith("_s") or c == "tokens" else np.int64)
                             for c in cols})
    n_rank, n_mb = int(rank.max()) + 1, int(mb.max()) + 1
    key = (stage.astype(np.int64) * n_rank + rank) * n_mb + mb
    uniq, inv = np.unique(key, return_inverse=True)
    dur = np.asarray(tl.duration, dtype=np.float64)[rows]
    kind, comm = np.asarray(tl["kind"])[rows], np.asarray(tl["comm"])[rows]

    def total(mask: np.ndarray) -> np.ndarray:
        return np.bincount(inv[mask], weights=dur[mask], minlength=len(uniq))

    tokens = np.zeros(len(uniq))
    np.maximum.at(tokens, inv, np.asarray(tl["tokens"], dtype=np.float64)[rows])
    return pd.DataFrame({"stage": (uniq // (n_rank * n_mb)).astype(stage.dtype),
                         "rank": (uniq // n_mb % n_rank).astype(rank.dtype),
                         "microbatch": (uniq % n_mb).astype(mb.dtype), "tokens": tokens,
                         "compute_s": total(kind == "compute"), "cp_s": total((kind == "comm") & (comm == "cp"))})


def rank_microbatch_table(tl: Timeline) -> pd.DataFrame:
    """One row per (stage, rank, microbatch) the rank takes part in: its tokens and its compute seconds
    (forward + backward), the scatter that shows 'same tokens, very different time'."""
    return rank_microbatch_sums(tl).drop(columns="cp_s")


def microbatch_skew(table: pd.DataFrame) -> np.ndarray:
    """max/min per-rank compute time of each (stage, microbatch)."""
    g = table.groupby(["stage", "microbatch"])["compute_s"]
    mx, mn = g.max().to_numpy(), g.min().to_numpy()
    return np.where(mn > 0, mx / np.where(mn > 0, mn, 1.0), 1.0)


def compute_metrics(tl: Timeline, *, tokens: int, model_flops: float, num_gpus: int, peak_tflops: float,
                    peak_memory_gib: float, num_microbatches: int, scheduling_time_s: float = 0.0,
                    bound_s: float = 0.0) -> Metrics:
    T = tl.iteration_time
    s = per_rank_sums(tl)
    busy = s["compute"] + s["cp"] + s["pp"] + s["dp"] + s["dp_wait"] + s["tp"] + s["ep"]
    pipe = np.clip((T - busy) / T, 0.0, 1.0) if T > 0 else np.zeros_like(busy)
    dpb = s["dp_wait"] / T if T > 0 else np.zeros_like(busy)
    table = rank_microbatch_table(tl)
    skew = microbatch_skew(table)
    return Metrics(
        iteration_time_s=T,
        tokens=int(tokens),
        tokens_per_s=tokens / T if T > 0 else 0.0,
        tokens_per_s_per_gpu=tokens / T / num_gpus if T > 0 else 0.0,
        mfu=model_flops / (T * num_gpus * peak_tflops * 1e12) if T > 0 else 0.0,
        pipeline_bubble=float(pipe.mean()),
        pipeline_bubble_max=float(pipe.max()),
        dp_bubble=float(dpb.mean()),
        dp_bubble_max=float(dpb.max()),
        microbatch_skew_max=float(skew.max()) if skew.size else 1.0,
        microbatch_skew_mean=float(skew.mean()) if skew.size else 1.0,
        same_tokens_time_ratio=equal_tokens_time_ratio(table)[0],
        cp_comm_s=float(s["cp"].mean()),
        pp_comm_s=float(s["pp"].mean()),
        dp_comm_s=float(s["dp"].mean()),
        peak_memory_gib=peak_memory_gib,
        num_microbatches=num_microbatches,
        scheduling_time_s=scheduling_time_s,
        tp_comm_s=float(s["tp"].mean()),
        ep_comm_s=float(s["ep"].mean()),
        bound_s=float(bound_s),
        efficiency=bound_s / T if T > 0 else 0.0,
    )


def equal_tokens_time_ratio(table: pd.DataFrame, tol: float = 0.10) -> tuple[float, dict]:
    """The largest compute-time ratio between two rank-microbatches whose token counts are within ``tol`` of
    each other (b ≤ (1 + tol)·a), over stage 0, and the pair that attains it.

    This is the "same tokens, several times the time" symptom of memory-driven CP degrees. O(n log n).
    """
    t = table[table["stage"] == 0] if "stage" in table else table
    t = t[t["tokens"] > 0]
    if len(t) < 2:
        return 1.0, {}
    order = np.argsort(t["tokens"].to_numpy(), kind="stable")
    tok = t["tokens"].to_numpy()[order]
    sec = t["compute_s"].to_numpy()[order]
    hi = np.searchsorted(tok, tok * (1 + tol), side="right")
    # sparse tables for O(1) range max/min of times over [i, hi_i)
    n = len(sec)
    levels_max, levels_min = [sec], [sec]
    k = 1
    while 2 * k <= n:
        levels_max.append(np.maximum(levels_max[-1][:-k], levels_max[-1][k:]))
        levels_min.append(np.minimum(levels_min[-1][:-k], levels_min[-1][k:]))
        k *= 2
    idx = np.arange(n)
    span = np.maximum(hi - idx, 1)
    lvl = np.floor(np.log2(span)).astype(int)
    rmax = np.array([max(levels_max[lv][i], levels_max[lv][h - (1 << lv)]) for i, h, lv in zip(idx, hi, lvl)])
    rmin = np.array([min(levels_min[lv][i], levels_min[lv][h - (1 << lv)]) for i, h, lv in zip(idx, hi, lvl)])
    ratio = rmax / np.maximum(rmin, 1e-30)
    i = int(np.argmax(ratio))
    best = float(ratio[i])
    win = slice(i, hi[i])
    j_max = i + int(np.argmax(sec[win]))
    j_min = i + int(np.argmin(sec[win]))
    rows = t.iloc[order]
    pair = {"fast": rows.iloc[j_min].to_dict(), "slow": rows.iloc[j_max].to_dict()}
    return best, pair
