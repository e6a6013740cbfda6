"""Metrics of one simulated (or measured) iteration (DESIGN §6; docs/metrics.md defines each).

All per-rank quantities are indexed by (stage, pool rank). Bubbles are fractions of the iteration time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from dcpsim.sim.timeline import Timeline


@dataclass(frozen=True)
class Metrics:
    iteration_time_s: float
    tokens: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    pipeline_bubble: float  # mean over ranks
    pipeline_bubble_max: float
    dp_bubble: float  # mean over ranks
    dp_bubble_max: float
    microbatch_skew_max: float  # max over (stage, microbatch) of max/min per-rank compute time
    microbatch_skew_mean: float
    same_tokens_time_ratio: float  # max time ratio of two rank-microbatches with tokens within ±10%
    cp_comm_s: float  # exposed, mean per rank
    pp_comm_s: float
    dp_comm_s: float
    peak_memory_gib: float  # max over ranks
    num_microbatches: int
    scheduling_time_s: float = 0.0
    tp_comm_s: float = 0.0  # exposed TP (sequence-parallel) communication, mean per rank

    def to_dict(self) -> dict:
        return asdict(self)


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
        "dp_wait": total(kind == "idle"),
    }


def rank_microbatch_table(tl: Timeline) -> pd.DataFrame:
    """One row per (stage, rank, microbatch) the rank takes part in: its tokens and its compute seconds
    (forward + backward), the scatter that shows 'same tokens, very different time'."""
    mask = (tl["kind"] == "compute") & (tl["microbatch"] >= 0)
    df = pd.DataFrame({"stage": tl["stage"][mask], "rank": tl["rank"][mask], "microbatch": tl["microbatch"][mask],
                       "tokens": tl["tokens"][mask], "compute_s": tl.duration[mask], "phase": tl["phase"][mask]})
    fwd = df[df.phase == "F"].set_index(["stage", "rank", "microbatch"])
    tot = df.groupby(["stage", "rank", "microbatch"], sort=True)["compute_s"].sum()
    out = pd.DataFrame({"tokens": fwd["tokens"].reindex(tot.index).to_numpy(), "compute_s": tot.to_numpy()},
                       index=tot.index).reset_index()
    return out


def microbatch_skew(table: pd.DataFrame) -> np.ndarray:
    """max/min per-rank compute time of each (stage, microbatch)."""
    g = table.groupby(["stage", "microbatch"])["compute_s"]
    mx, mn = g.max().to_numpy(), g.min().to_numpy()
    return np.where(mn > 0, mx / np.where(mn > 0, mn, 1.0), 1.0)


def compute_metrics(tl: Timeline, *, tokens: int, model_flops: float, num_gpus: int, peak_tflops: float,
                    peak_memory_gib: float, num_microbatches: int, scheduling_time_s: float = 0.0) -> Metrics:
    T = tl.iteration_time
    s = per_rank_sums(tl)
    busy = s["compute"] + s["cp"] + s["pp"] + s["dp"] + s["dp_wait"] + s["tp"]
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
