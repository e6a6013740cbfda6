"""A cheap estimate of how long planning and simulating some batches will take, to warn before a long run.

``run_seconds(batch_sizes, policies)`` adds, per batch and policy, the CPU seconds that ``run_policy`` (plan,
validate, simulate one batch) was measured to take at that batch size: ``MEASURED`` holds each policy's
times at a few sizes, interpolated in log-log and extrapolated past the largest size with the slope of its
last segment (the planners grow faster than linearly: Megatron-Core's by about n^1.8 to n^2.1). It is an
order of magnitude, not a promise: the times are from one layout on one machine, and FlexSP's MILP can take
far longer than its estimate (``MEASURED``'s comment).

Source of ``MEASURED``: ``python experiments/bench/estimate.py`` (CPU seconds of one ``run_policy`` call on
the default scenario, llama3-8b on 64 H200, TP 1, PP 4, pool 16, the ``256k`` preset with
``global_batch_seqs = n``), 2026-12-02 on the 2-core VM beside other jobs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# policy -> ((sequences per batch, CPU seconds of one run_policy call), ...), ascending sizes
MEASURED: dict[str, tuple[tuple[int, float], ...]] = {
    "static-cp": ((2000, 0.11), (8000, 0.17), (32000, 0.50)),
    "mcore-dcp": ((2000, 0.12), (8000, 0.94), (32000, 11.78), (80000, 81.48)),
    "mcore-dcp-legacy": ((2000, 0.06), (8000, 0.16), (32000, 0.38)),
    "hydra": ((2000, 0.19), (8000, 0.41), (32000, 0.87)),
    "dp-balanced": ((2000, 0.05), (8000, 0.13), (32000, 0.32)),
    "wlb-llm": ((2000, 0.06), (8000, 0.18), (32000, 0.54)),
    # FlexSP's MILP time is not a function of the batch size: 344.1 s at 8,000 on this scenario, but 3-4 s at
    # 8,906 sequences on prod-11264-256k (the program sizes follow the pool and the memory budget, and
    # max_milp_vars skips the largest), so only its small sizes are used: its estimate can be far too low
    "flexsp": ((2000, 0.42), (4000, 0.96)),
    "distca": ((2000, 0.21), (8000, 0.95), (32000, 12.41), (80000, 82.43)),
}
DEFAULT_POLICY = "mcore-dcp"  # a policy not in MEASURED (a plug-in) is priced as this one
LONG_RUN_S = 60.0  # estimates above this are announced with a warning before the run starts


def policy_seconds(policy: str, n: int) -> float:
    """Estimated CPU seconds of one batch of ``n`` sequences under ``policy`` (a label; options are ignored)."""
    points = MEASURED.get(policy.split(":", 1)[0], MEASURED[DEFAULT_POLICY])
    if n <= 0:
        return 0.0
    if n <= points[0][0]:
        return points[0][1] * n / points[0][0]   # below the smallest size: proportional (an upper bound)
    lo, hi = points[-2], points[-1]
    for a, b in zip(points, points[1:]):
        if n <= b[0]:
            lo, hi = a, b
            break
    slope = math.log(hi[1] / lo[1]) / math.log(hi[0] / lo[0])
    return lo[1] * (n / lo[0]) ** slope


def run_seconds(batch_sizes: Sequence[int], policies: Sequence[str]) -> float:
    """Estimated CPU seconds of every policy on every batch (sizes in sequences)."""
    return sum(policy_seconds(p, int(n)) for p in policies for n in batch_sizes)


def duration(seconds: float) -> str:
    """'about 40 s', 'about 12 min', 'about 3 h', 'more than a day'."""
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 90 * 60:
        return f"about {seconds / 60:.0f} min"
    if seconds < 24 * 3600:
        return f"about {seconds / 3600:.0f} h"
    return "more than a day"


def long_run_warning(batch_sizes: Sequence[int], policies: Sequence[str], what: str = "this run") -> str | None:
    """A one-line warning with the estimate when ``what`` will take longer than ``LONG_RUN_S``; else None."""
    sizes = sorted(int(n) for n in batch_sizes)
    if not sizes:
        return None
    held = (f"{len(sizes)} batch(es) of {sizes[0]:,} sequences" if sizes[0] == sizes[-1]
            else f"{len(sizes)} batches of {sizes[0]:,}-{sizes[-1]:,} sequences")
    held += f" x {len(policies)} polic{'y' if len(policies) == 1 else 'ies'}"
    return warning(held, run_seconds(sizes, policies), what)


def warning(held: str, seconds: float, what: str) -> str | None:
    """'warning: {held}: {what} may take about …' when ``seconds`` is above ``LONG_RUN_S``; else None."""
    if seconds <= LONG_RUN_S:
        return None
    return (f"warning: {held}: {what} may take {duration(seconds)} (estimated from measured planning times per "
            "batch size, docs/experiments.md 'Long runs'); a smaller token budget, fewer sequences per batch or "
            "a longer context runs faster")
