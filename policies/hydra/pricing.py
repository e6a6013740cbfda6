"""Every question HyDra asks the cost model, in one place (docs/hydra.md §1), through its declared
:class:`~dcpsim.cost_models.base.Pricing` (:func:`~dcpsim.cost_models.pricing.pricing_of`: the analytic model's
batched one, or for any other ``CostModel`` the default built on ``group_costs``): a sequence's time alone in a
group, a group's fixed overhead, which pipeline stages cost the same; and the load of a finished plan.

A group's time splits into a fixed part and per-sequence parts: time(c, u, S) ≈ overhead(c, u) + Σ_{L∈S}
work(L | c, u), overhead = 2·time(1 token) − time(2 tokens) (zero tokens by linear extrapolation) and work =
time(L alone) − overhead; groups are priced from pool rank 0 at the stage where they cost most.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.pricing import pricing_of
from dcpsim.policies.flatten import flatten
from dcpsim.policies.plan import Plan

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

MIN_WORK_S = 1e-12  # a priced share is never zero: every sequence costs something


def stage_classes_of(cost_model: CostModel) -> tuple[int, ...]:
    """Each pipeline stage's class: the first stage that costs the same numbers (``Pricing.stage_classes``)."""
    return tuple(pricing_of(cost_model).stage_classes())


def prices_fixed_costs(cost_model: CostModel) -> bool:
    """Whether the cost model prices the per-layer, per-ring-step and per-microbatch fixed costs
    (``Pricing.prices_fixed_costs``). Off (``--cost-terms legacy``), HyDra plans as its first version did: no
    extra-overhead share in the target, no height profile, one microbatch count."""
    return pricing_of(cost_model).prices_fixed_costs()


def block_times(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
                classes: tuple[int, ...], prefix: tuple[int | None, ...]) -> list[np.ndarray]:
    """Row i: [options, k] times of every option (``sizes``, ``ulysses``) at each of the first k = ``prefix[i]``
    ``lengths`` (None: all) at stage ``classes[i]`` (``Pricing.alone_block_totals``)."""
    return pricing_of(cost_model).alone_block_totals(lengths, sizes, ulysses, classes, prefix)


def stage_times(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel,
                stages: tuple[int, ...] | None = None, option: np.ndarray | None = None) -> np.ndarray:
    """Time (s) of each length alone in a group of ``sizes`` ranks (pool rank 0 on) with inner Ulysses degree
    ``ulysses`` at the heaviest of ``stages`` (None: every stage; 1F1B runs at the pace of the heaviest stage),
    each class of stages priced once (``Pricing.alone_stage_totals``); with ``option``, ``sizes`` and
    ``ulysses`` are per option and length j is priced at option ``option[j]``."""
    if len(lengths) == 0:
        return np.zeros(0)
    pricing = pricing_of(cost_model)
    if stages is None:
        stages = tuple(range(cost_model.job.pp))
    rep = pricing.stage_classes()
    rows = pricing.alone_stage_totals(lengths, sizes, ulysses, tuple(dict.fromkeys(rep[s] for s in stages)),
                                      None, option)
    return np.max(rows, axis=0)  # the heaviest of the stages (a max is exact: any order, the same numbers)


def group_overhead(sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel) -> np.ndarray:
    """Fixed time (s) of a group of ``sizes`` ranks with engine ``ulysses``: its cost at zero tokens at the
    heaviest stage, extrapolated from probes of 1 and 2 tokens (never negative; ``Pricing.group_overhead``)."""
    return pricing_of(cost_model).group_overhead(np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64))


def sequence_work(lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray, cost_model: CostModel) -> np.ndarray:
    """Per-rank work (s) of each sequence in a group of ``sizes`` ranks with engine ``ulysses``: its time
    alone minus the group's fixed overhead (module docstring). Elementwise over the three arrays."""
    iso = stage_times(np.asarray(lengths, dtype=np.int64), sizes, ulysses, cost_model)
    return np.maximum(MIN_WORK_S, iso - group_overhead(sizes, ulysses, cost_model)) if len(iso) else iso


def rank_loads(plan: Plan, batch: GlobalBatch, cost_model: CostModel) -> np.ndarray:
    """[microbatch, rank]: the load (s, per stage, forward + backward) of every pool rank under HyDra's work
    model: each group's overhead plus its sequences' work at the group's size and engine. Idle ranks: 0."""
    fp = flatten(plan, batch)  # (the one flattening of a plan against its batch)
    g = fp.groups
    work = sequence_work(g.seq_len, g.size[g.seq_group], g.ulysses[g.seq_group], cost_model)
    gload = np.bincount(g.seq_group, weights=work, minlength=fp.num_groups)
    out = np.zeros((plan.num_microbatches, plan.pool_size))
    if fp.num_groups:
        gload = gload + group_overhead(g.size, g.ulysses, cost_model)
        out[fp.group_mb[fp.member_group], fp.member_rank] = gload[fp.member_group]
    return out
