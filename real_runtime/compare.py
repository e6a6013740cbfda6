"""Comparing a predicted and a measured timeline of one iteration (both in the simulator's schema).

Three levels, each an absolute percentage error ``|predicted / measured − 1|``:

* **rank-microbatch compute**: per (stage, rank, microbatch), forward + backward ``compute`` seconds;
* **microbatch critical time**: per microbatch, the maximum over its ranks of compute + exposed CP
  communication, forward + backward (what the slowest member of the microbatch spends on it);
* **iteration time**: the latest ``end`` of the iteration, gradient sync and optimizer step included.

MAPE is the mean of the errors. Both timelines are aggregated per (stage, rank, microbatch) by the
simulator's own :func:`sim.metrics.rank_microbatch_sums`, so a measured and a simulated timeline are summed the
same way; this module needs neither the simulation engine (simpy) nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dcpsim.sim.metrics import rank_microbatch_sums
from dcpsim.sim.timeline import Timeline

KEYS = ["stage", "rank", "microbatch"]


def ape(predicted: np.ndarray | float, measured: np.ndarray | float) -> np.ndarray:
    """Absolute percentage error (a fraction), elementwise; ``nan`` where nothing was measured."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    return np.where(m > 0, np.abs(p / np.where(m > 0, m, 1.0) - 1.0), np.nan)


def mape(predicted: np.ndarray | Sequence[float], measured: np.ndarray | Sequence[float]) -> float:
    """Mean absolute percentage error (a fraction); ``nan`` for no data."""
    e = ape(np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64))
    return float(np.nanmean(e)) if e.size and not np.all(np.isnan(e)) else float("nan")


def rank_microbatch_times(tl: pd.DataFrame) -> pd.DataFrame:
    """Per (stage, rank, microbatch) of a timeline (a frame in the schema of ``sim.timeline``; extra columns
    are ignored): tokens, compute seconds, exposed CP seconds and their sum ``busy_s`` (F + B)."""
    out = rank_microbatch_sums(Timeline.from_frame(tl))
    out["busy_s"] = out["compute_s"] + out["cp_s"]
    return out


def compare_iteration(predicted: pd.DataFrame, measured: pd.DataFrame) -> dict[str, pd.DataFrame | float]:
    """Errors of one iteration: ``rank_microbatch`` (one row per rank-microbatch), ``microbatch`` (one row per
    microbatch) and the scalars ``predicted_s``, ``measured_s``, ``iteration_ape``."""
    p, m = rank_microbatch_times(predicted), rank_microbatch_times(measured)
    rm = p.merge(m, on=KEYS, how="outer", suffixes=("_pred", "_meas"), indicator=True)
    if (rm["_merge"] != "both").any():
        bad = rm[rm["_merge"] != "both"].iloc[0]
        side = "predicted" if bad["_merge"] == "left_only" else "measured"
        raise ValueError(f"predicted and measured timelines differ in who runs what: stage {bad['stage']}, "
                         f"rank {bad['rank']}, microbatch {bad['microbatch']} only in the {side} one")
    rm = rm.drop(columns="_merge")
    rm["compute_ape"] = ape(rm["compute_s_pred"], rm["compute_s_meas"])
    mb = rm.groupby("microbatch", sort=True).agg(
        ranks=("rank", "size"), tokens_max=("tokens_pred", "max"), predicted_s=("busy_s_pred", "max"),
        measured_s=("busy_s_meas", "max")).reset_index()
    mb["ape"] = ape(mb["predicted_s"], mb["measured_s"])
    ps, ms = float(predicted["end"].max()), float(measured["end"].max())
    return {"rank_microbatch": rm, "microbatch": mb, "predicted_s": ps, "measured_s": ms,
            "iteration_ape": float(ape(ps, ms))}


def summarise(iterations: Sequence[Mapping[str, pd.DataFrame | float]]) -> dict[str, float]:
    """MAPEs over several iterations of one policy, mean iteration times, and the median predicted /
    measured ratio of rank-microbatch compute (a bias: below 1 the model is optimistic)."""
    rm = pd.concat([it["rank_microbatch"] for it in iterations], ignore_index=True)
    mb = pd.concat([it["microbatch"] for it in iterations], ignore_index=True)
    ratio = rm["compute_s_pred"] / rm["compute_s_meas"].where(rm["compute_s_meas"] > 0)
    return {
        "rank_microbatch_mape": float(np.nanmean(rm["compute_ape"])),
        "microbatch_mape": float(np.nanmean(mb["ape"])),
        "iteration_mape": float(np.mean([it["iteration_ape"] for it in iterations])),
        "predicted_iteration_s": float(np.mean([it["predicted_s"] for it in iterations])),
        "measured_iteration_s": float(np.mean([it["measured_s"] for it in iterations])),
        "compute_ratio_median": float(np.nanmedian(ratio)),
        "rank_microbatches": len(rm),
        "microbatches": len(mb),
    }


def ranking(times: Mapping[str, float]) -> list[str]:
    """Labels ordered from the fastest (smallest time) to the slowest; ties keep the given order."""
    return [k for k, _ in sorted(times.items(), key=lambda kv: kv[1])]


def same_ranking(predicted: Mapping[str, float], measured: Mapping[str, float], tie: float = 0.02) -> bool:
    """Whether measurement orders every pair of labels as the prediction does. A pair whose predicted
    times are within ``tie`` (relative) of each other is a predicted tie and may come in either order."""
    keys = list(predicted)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            pa, pb = predicted[a], predicted[b]
            if abs(pa - pb) <= tie * max(pa, pb):
                continue
            if (pa < pb) != (measured[a] < measured[b]):
                return False
    return True


def run_spread(repeats_by_step: Sequence[Sequence[float]]) -> float:
    """Run-to-run spread of measured iteration times: per step (one batch and plan, run several times), the
    range of its times over their mean; the mean over steps. ``nan`` when no step ran twice."""
    spreads = [(max(ts) - min(ts)) / float(np.mean(ts)) for ts in repeats_by_step if len(ts) > 1 and np.mean(ts) > 0]
    return float(np.mean(spreads)) if spreads else float("nan")


def ranking_verdict(predicted: Mapping[str, float], measured: Mapping[str, float], spread: Mapping[str, float],
                    tie: float = 0.02) -> dict[str, object]:
    """Compare the orderings pair by pair, knowing the measurement's noise.

    A pair is a predicted tie when its predicted times are within ``tie`` (relative); otherwise it *agrees*
    when measurement orders it as the prediction does. Its measured difference is *resolved* when
    ``|m_a − m_b| / max(m_a, m_b)`` exceeds the larger of the two policies' run-to-run spreads
    (:func:`run_spread`); an unresolved difference is within the noise and could go either way on a rerun.
    Verdict: ``same`` (every non-tied pair agrees and is resolved), ``same within noise`` (no resolved pair
    disagrees, but some pair is unresolved: the order is decided, or contradicted, by differences smaller
    than the noise), else ``different``. Unmeasured spreads (``nan``) resolve every difference. Returns the
    verdict, the counts of pairs that agree / disagree, how many of each are resolved, and per pair
    ``(a, b, relative difference, noise, agrees, resolved)``.
    """
    keys = list(predicted)
    pairs = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            pa, pb = predicted[a], predicted[b]
            if abs(pa - pb) <= tie * max(pa, pb):
                continue
            ma, mb = measured[a], measured[b]
            diff = abs(ma - mb) / max(ma, mb)
            known = [s for s in (spread.get(a, float("nan")), spread.get(b, float("nan"))) if not np.isnan(s)]
            noise = max(known) if known else float("nan")
            resolved = bool(np.isnan(noise) or diff > noise)
            pairs.append((a, b, float(diff), float(noise), bool((pa < pb) == (ma < mb)), resolved))
    disagree = [p for p in pairs if not p[4]]
    if any(p[5] for p in disagree):
        verdict = "different"
    else:
        verdict = "same" if all(p[5] for p in pairs) else "same within noise"
    return {"verdict": verdict, "agree": len(pairs) - len(disagree), "disagree": len(disagree),
            "agree_resolved": sum(1 for p in pairs if p[4] and p[5]),
            "disagree_resolved": sum(1 for p in disagree if p[5]), "pairs": pairs}
