"""Megatron-Core dynamic CP (docs/policies/mcore-dcp.md): the production baseline, as policies
``mcore-dcp`` and ``mcore-dcp-legacy``.

Megatron-Core sizes every sequence's CP degree to fit *memory*: a sequence of L tokens gets at least the
smallest power of two c with L / c ≤ M tokens per rank, and the scheduler then packs sequences into
microbatches of variable-size CP groups, balancing an attention-only work estimate L² / c. Two schedulers
exist upstream, both re-implemented here output-for-output:

* ``mcore-dcp``: the current one (``dev`` @d48bd6be, ``DefaultDynamicCPScheduler``), see
  :mod:`policies.mcore_scheduler`;
* ``mcore-dcp-legacy``: the older one (``main`` @d98e8a64, ``BalancedCPScheduler``), see
  :mod:`policies.mcore_scheduler_legacy`. It never checks memory, so its groups can hold more than M tokens
  per rank; the plan records the peak in ``meta["peak_tokens_per_rank"]``.

:func:`schedule_sample_ids` is the upstream-shaped entry point (``groups[microbatch][rank]`` = the sample
ids, i.e. indices into ``seqlens``, that rank processes); :func:`groups_to_plan` turns that into a
:class:`~policies.plan.Plan`: in each microbatch every maximal run of consecutive ranks with the same id list
is one CP group, and a sequence's degree is the number of ranks that list it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.engines import ENGINE_CHOICES, assign_engines
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.mcore_scheduler import allowed_sizes, schedule_current
from dcpsim.policies.mcore_scheduler_legacy import schedule_legacy
from dcpsim.policies.opening import plan_inputs
from dcpsim.policies.plan import CPGroup, Engine, Plan, make_plan
from dcpsim.policies.registry import option, register_policy

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

UPSTREAM = {
    False: "NVIDIA/Megatron-LM dev@d48bd6be DefaultDynamicCPScheduler (next_hdp_group_packing_aware)",
    True: "NVIDIA/Megatron-LM main@d98e8a64 BalancedCPScheduler (next_hdp_group)",
}


def _check_int(name: str, value: Any, lo: int, valid: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < lo:
        raise PolicyError(f"{name} = {value!r} is invalid: {valid}")
    return int(value)


def schedule_sample_ids(seqlens: Sequence[int] | np.ndarray, total_gpus: int, max_seqlen_per_rank: int,
                        min_cp_size: int = 1, legacy: bool = False) -> list[list[list[int]]]:
    """Megatron-Core's dynamic-CP schedule of one global batch.

    ``seqlens[i]`` is sample i's length in tokens; ``total_gpus`` is the DP×CP pool size N;
    ``max_seqlen_per_rank`` is the per-rank token budget M; ``min_cp_size`` is the smallest degree m0 (the
    legacy scheduler has none, so it must be 1 there). Returns ``groups[microbatch][rank]`` = the ordered
    sample ids that rank processes. Raises :class:`PolicyError` for input no schedule can satisfy: a length
    ≤ 0 or above N·M, N or M below 1, or m0 outside 1..N.
    """
    N = _check_int("total_gpus", total_gpus, 1, "the DP×CP pool size must be a positive integer")
    M = _check_int("max_seqlen_per_rank", max_seqlen_per_rank, 1,
                   "the per-rank token budget must be a positive integer")
    m0 = _check_int("min_cp_size", min_cp_size, 1, f"must be an integer in 1..{N} (the pool size)")
    if m0 > N:
        raise PolicyError(f"min_cp_size = {m0} is invalid: must be in 1..{N} (the pool size)")
    if legacy and m0 != 1:
        raise PolicyError(f"min_cp_size = {m0} is invalid for the legacy scheduler (BalancedCPScheduler has "
                          "no minimum CP size): use 1, or the current scheduler")
    arr = np.asarray(seqlens)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise PolicyError(f"seqlens must be a 1-D sequence of integers, got {arr.dtype} of shape {arr.shape}")
    bad = np.flatnonzero((arr <= 0) | (arr > N * M))
    if bad.size:
        i = int(bad[0])
        raise PolicyError(f"sample {i} has length {int(arr[i])}: valid lengths are 1..{N * M} "
                          f"(pool of {N} ranks × {M} tokens per rank)")
    lengths = [int(x) for x in arr.tolist()]
    if not lengths:
        return []
    return schedule_legacy(lengths, N, M) if legacy else schedule_current(lengths, N, M, m0)


def groups_to_plan(groups: list[list[list[int]]], seq_ids: Sequence[int], lengths: Sequence[int], pool: int,
                   policy: str, **meta: Any) -> Plan:
    """Turn ``groups[mb][rank]`` (positions into ``seq_ids``) into a ring-engine :class:`Plan`.

    Each maximal run of consecutive ranks with identical lists becomes a CP group; every sequence's degree
    (ranks listing it) must equal its group's size, else :class:`PolicyError` (a scheduler bug, never input).
    ``meta`` gains ``peak_tokens_per_rank``, the largest Σ L / degree of any rank in any microbatch, and
    ``aligned``: whether every group starts at a multiple of its size (upstream's process groups are aligned
    blocks; the legacy scheduler sometimes emits a group they cannot express, which the simulator runs as is).
    """
    mbs: list[list[CPGroup]] = []
    peak = 0.0
    aligned = True
    for k, ranks in enumerate(groups):
        if len(ranks) != pool:
            raise PolicyError(f"microbatch {k} lists {len(ranks)} ranks, expected {pool}")
        listed: dict[int, int] = {}
        for ids in ranks:
            for s in ids:
                listed[s] = listed.get(s, 0) + 1
        cps: list[CPGroup] = []
        r = 0
        while r < pool:
            start, ids = r, ranks[r]
            while r < pool and ranks[r] == ids:
                r += 1
            if not ids:
                continue
            size = r - start
            for s in ids:
                if listed[s] != size:
                    raise PolicyError(f"microbatch {k}: sample {s} is listed by {listed[s]} ranks but its "
                                      f"group spans ranks {start}..{r - 1} ({size} ranks)")
            peak = max(peak, sum(lengths[s] for s in ids) / size)
            aligned = aligned and start % size == 0
            cps.append(CPGroup(tuple(range(start, r)), tuple(int(seq_ids[s]) for s in ids),
                               Engine.for_size("ring", size)))
        mbs.append(cps)
    return make_plan(policy, pool, mbs, peak_tokens_per_rank=peak, aligned=aligned, **meta)


@dataclass(frozen=True)
class _McoreDCP:
    """Options shared by both schedulers.

    ``max_seqlen_per_rank``: the per-rank token budget M (None: ``cost_model.max_tokens_per_rank()``);
    ``min_cp_size``: the smallest CP degree m0 (current scheduler only); ``cp_engine``: ``ring`` (upstream's
    TransformerEngine ``p2p`` default), ``ulysses``, ``hybrid`` or ``auto`` (policies.engines) — the upstream
    scheduler's groups are kept and only their engines change, so "upstream scheduler + hierarchical engine"
    can be measured apart from HyDra's scheduler.
    """

    max_seqlen_per_rank: int | None = option(None, ge=1)
    min_cp_size: int = option(1, ge=1)
    cp_engine: str = option("ring", choices=ENGINE_CHOICES)
    name: ClassVar[str]  # set by @register_policy
    legacy: ClassVar[bool] = False

    def __post_init__(self) -> None:  # after the option check (register_policy)
        if self.legacy and self.min_cp_size != 1:
            raise PolicyError(f"{self.name}: min_cp_size = {self.min_cp_size} is invalid: the legacy scheduler "
                              "has no minimum CP size (use 1, or the mcore-dcp policy)")

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan:
        inp = plan_inputs(self.name, batch, cost_model, self.max_seqlen_per_rank)
        budget, lengths = inp.budget, inp.lengths
        groups = schedule_sample_ids(lengths, job.pool, budget, self.min_cp_size, legacy=self.legacy)
        plan = groups_to_plan(groups, inp.ids.tolist(), lengths.tolist(), job.pool,
                              self.name, max_tokens_per_rank=budget, min_cp_size=self.min_cp_size,
                              memory_checked=not self.legacy, upstream=UPSTREAM[self.legacy],
                              allowed_sizes=allowed_sizes(job.pool, self.min_cp_size))
        if self.cp_engine == "ring":
            return plan
        return assign_engines(plan, self.cp_engine, job, cost_model, batch)


@register_policy("mcore-dcp")
@dataclass(frozen=True)
class McoreDCP(_McoreDCP):
    """Megatron-Core's current dynamic-CP scheduler (degrees from memory, packing-aware balance)."""

    legacy: ClassVar[bool] = False


@register_policy("mcore-dcp-legacy")
@dataclass(frozen=True)
class McoreDCPLegacy(_McoreDCP):
    """Megatron-Core's legacy dynamic-CP scheduler (work buckets, no memory check)."""

    legacy: ClassVar[bool] = True
