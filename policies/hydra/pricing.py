"""Every question HyDra asks the cost model, in one place (docs/hydra.md §1): a sequence's time alone in a
group, a group's fixed overhead, which pipeline stages cost the same, and the load of a finished plan.

A group's time splits into a fixed part and per-sequence parts: time(c, u, S) ≈ overhead(c, u) + Σ_{L∈S}
work(L | c, u), where overhead = 2·time(1 token) − time(2 tokens) (:func:`group_overhead`: zero tokens by
linear extrapolation) and work = time(L alone) − overhead (:func:`sequence_work`); groups are priced from pool
rank 0 at the stage where they cost most.

**The interface used.** Any ``CostModel`` works, through ``group_costs`` (each sequence alone in a group) and
``job``. A cost model may offer faster, bit-identical batch forms, looked up here by name and nowhere else:
``alone_stage_totals`` (several stages in one call), ``alone_block_totals`` (every option × every length),
``stage_classes()`` (which stages cost the same) and ``terms.fixed_costs``; ``AnalyticCostModel`` has all four.
This module is the seam where a declared pricing protocol replaces those look-ups; :func:`flatten` is the one
place a plan is flattened against its batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from dcpsim.cost_models.base import CostModel, GroupBatch
from dcpsim.policies.plan import Plan

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

MIN_WORK_S = 1e-12  # a priced share is never zero: every sequence costs something


def stage_classes_of(cost_model: CostModel) -> tuple[int, ...]:
    """Each pipeline stage's class: the first stage that costs the same numbers (the cost model's
    ``stage_classes``; every stage its own for a cost model that does not say)."""
    f = getattr(cost_model, "stage_classes", None)
    return tuple(f()) if f is not None else tuple(range(getattr(cost_model.job, "pp", 1)))


def prices_fixed_costs(cost_model: CostModel) -> bool:
    """Whether the cost model prices the per-layer, per-ring-step and per-microbatch fixed costs
    (``CostTerms.fixed_costs``; models without terms do). Off (``--cost-terms legacy``), HyDra plans as its
    first version did: no extra-overhead share in the target, no height profile, one microbatch count."""
    return bool(getattr(getattr(cost_model, "terms", None), "fixed_costs", True))


def class_times(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
                classes: tuple[int, ...], option: np.ndarray | None = None) -> list[np.ndarray]:
    """Time (s) of each length alone in a group of ``sizes`` ranks (pool rank 0 on) with inner Ulysses degree
    ``ulysses``, one row per stage of ``classes`` (distinct stage classes), in one cost-model call where the
    model offers ``alone_stage_totals``, else through ``group_costs``; with ``option``, ``sizes`` and
    ``ulysses`` are per option and length j is priced at option ``option[j]``."""
    several = getattr(cost_model, "alone_stage_totals", None)
    if several is not None:
        return several(lengths, sizes, ulysses, classes, None, option)
    if option is not None:
        sizes, ulysses = np.asarray(sizes)[option], np.asarray(ulysses)[option]
    n = len(lengths)
    gb = GroupBatch(seq_len=np.asarray(lengths, dtype=np.int64), seq_group=np.arange(n, dtype=np.int64),
                    size=np.asarray(sizes, dtype=np.int64), ulysses=np.asarray(ulysses, dtype=np.int64),
                    first_rank=np.zeros(n, dtype=np.int64))
    return [np.asarray(cost_model.group_costs(gb, c).total_s, dtype=np.float64) for c in classes]


def block_times(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
                classes: tuple[int, ...], prefix: tuple[int | None, ...]) -> list[np.ndarray]:
    """Row i: [options, k] times of every option (``sizes``, ``ulysses``) at each of the first k = ``prefix[i]``
    ``lengths`` (None: all) at stage ``classes[i]``: :func:`class_times` of the block option by option (the
    cost model's ``alone_block_totals`` where it has one: the same numbers)."""
    block = getattr(cost_model, "alone_block_totals", None)
    if block is not None:
        return block(lengths, sizes, ulysses, classes, prefix)
    n_opt, n = len(sizes), len(lengths)
    rows = class_times(np.tile(lengths, n_opt), sizes, ulysses, cost_model, classes,
                       option=np.repeat(np.arange(n_opt), n))
    return [r.reshape(n_opt, n)[:, :k] for r, k in zip(rows, prefix)]


def stage_times(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
                stages: tuple[int, ...] | None = None, option: np.ndarray | None = None) -> np.ndarray:
    """Time (s) of each length alone in its group at the heaviest of ``stages`` (None: every stage; 1F1B runs
    at the pace of the heaviest stage); ``option`` as in :func:`class_times`."""
    if len(lengths) == 0:
        return np.zeros(0)
    if stages is None:
        stages = tuple(range(getattr(cost_model.job, "pp", 1)))
    rep = stage_classes_of(cost_model)
    rows = class_times(lengths, sizes, ulysses, cost_model, tuple(dict.fromkeys(rep[s] for s in stages)),
                       option=option)
    t = rows[0]
    for row in rows[1:]:  # (a max is exact: any order gives the same numbers)
        t = np.maximum(t, row)
    return t


def group_overhead(sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel) -> np.ndarray:
    """Fixed time (s) of a group of ``sizes`` ranks with engine ``ulysses``: its cost at zero tokens,
    extrapolated from probes of 1 and 2 tokens (never negative)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    ulysses = np.asarray(ulysses, dtype=np.int64)
    k = len(sizes)
    t = stage_times(np.r_[np.ones(k, dtype=np.int64), np.full(k, 2, dtype=np.int64)], np.r_[sizes, sizes],
                    np.r_[ulysses, ulysses], cost_model)
    return np.maximum(0.0, 2.0 * t[:k] - t[k:])


def sequence_work(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                  cost_model: CostModel) -> np.ndarray:
    """Per-rank work (s) of each sequence in a group of ``sizes`` ranks with engine ``ulysses``: its time
    alone minus the group's fixed overhead (module docstring). Elementwise over the three arrays."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0:
        return np.zeros(0)
    iso = stage_times(lengths, sizes, ulysses, cost_model)
    return np.maximum(MIN_WORK_S, iso - group_overhead(sizes, ulysses, cost_model))


# ---- the load of a finished plan ---------------------------------------------------------------------------
def flatten(plan: Plan, batch: GlobalBatch) -> tuple[np.ndarray, ...]:
    """A plan against its batch as arrays: per group its size, Ulysses degree and microbatch; per sequence
    (in plan order) its batch position and group; per member rank its rank and group."""
    ids = np.asarray(batch.seq_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    groups = [(k, g) for k, mb in enumerate(plan.microbatches) for g in mb.groups]
    size = np.array([g.size for _, g in groups], dtype=np.int64)
    uu = np.array([g.engine.ulysses for _, g in groups], dtype=np.int64)
    g_mb = np.array([k for k, _ in groups], dtype=np.int64)
    s_id = np.array([i for _, g in groups for i in g.seq_ids], dtype=np.int64)
    s_g = np.repeat(np.arange(len(groups)), [len(g.seq_ids) for _, g in groups])
    m_rank = np.array([r for _, g in groups for r in g.ranks], dtype=np.int64)
    m_g = np.repeat(np.arange(len(groups)), size)
    pos = order[np.searchsorted(ids[order], s_id)] if len(s_id) else np.zeros(0, np.int64)
    return size, uu, g_mb, pos, s_g, m_rank, m_g


def rank_loads(plan: Plan, batch: GlobalBatch, cost_model: CostModel) -> np.ndarray:
    """[microbatch, rank]: the load (s, per stage, forward + backward) of every pool rank under HyDra's work
    model: each group's overhead plus its sequences' work at the group's size and engine. Idle ranks: 0."""
    size, uu, g_mb, pos, sg, m_rank, mg = flatten(plan, batch)
    lengths = np.asarray(batch.lengths, dtype=np.int64)
    n_g = len(size)
    work = sequence_work(lengths[pos], size[sg], uu[sg], cost_model) if len(pos) else np.zeros(0)
    gload = np.bincount(sg, weights=work, minlength=n_g) + (group_overhead(size, uu, cost_model) if n_g else 0.0)
    out = np.zeros((plan.num_microbatches, plan.pool_size))
    if n_g:
        out[g_mb[mg], m_rank] = gload[mg]
    return out
