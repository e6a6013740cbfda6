"""Choosing a CP engine for a group: ``ring``, ``ulysses``, ``hybrid`` (Ulysses inside an NVLink domain, ring across)
or ``auto`` (the cheapest of the valid ones under the cost model). Shared by every policy."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.base import CostModel, GroupBatch
from dcpsim.cost_models.specs import JobSpec
from dcpsim.cost_models.ulysses import ulysses_degrees as job_ulysses_degrees
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.flatten import flatten, repeat_groups
from dcpsim.policies.plan import Engine, Microbatch, Plan

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

ENGINE_CHOICES = ("ring", "ulysses", "hybrid", "auto")


def check_engine_choice(kind: str) -> None:
    if kind not in ENGINE_CHOICES:
        raise PolicyError(f"cp_engine = {kind!r} is unknown; valid: {', '.join(ENGINE_CHOICES)}")


def ulysses_degrees(size: int, job: JobSpec) -> list[int]:
    """Valid inner Ulysses degrees u for a group of ``size`` ranks (cost_models.ulysses, the one rule): u
    divides the group size and the KV heads per TP rank, and u ranks (u·t GPUs) fit in one NVLink domain."""
    return list(job_ulysses_degrees(job, size))


def engine_for(kind: str, size: int, job: JobSpec, cost_model: CostModel | None = None,
               tokens: np.ndarray | None = None, first_rank: int = 0) -> Engine:
    """The engine of ``kind`` for a group of ``size`` ranks.

    ``ulysses`` needs the size to divide the KV heads per rank (else PolicyError). ``hybrid`` takes the largest
    valid inner degree. ``auto`` prices every valid (u, r) split for the group's sequence lengths ``tokens``
    with ``cost_model`` and keeps the cheapest (ties: the smaller u).
    """
    check_engine_choice(kind)
    if size == 1 or kind == "ring":
        return Engine.for_size("ring", size)
    us = ulysses_degrees(size, job)
    if kind == "ulysses":
        if size not in us:
            raise PolicyError(f"a Ulysses group of {size} ranks needs {size} to divide the KV heads per rank "
                              f"({job.kv_heads_per_rank}) and fit in an NVLink domain ({job.gpu.nvlink_domain} GPUs = "
                              f"{max(1, job.gpu.nvlink_domain // job.tp)} ranks of TP {job.tp}); use cp_engine "
                              "hybrid or auto")
        return Engine.for_size("ulysses", size)
    if kind == "hybrid" or cost_model is None or tokens is None:
        u = max(us)
    else:
        u = cheapest_ulysses(size, us, cost_model, np.asarray(tokens), first_rank)
    return engine_from_ulysses(size, u)


def cheapest_ulysses(size: int, us: list[int], cost_model: CostModel, lengths: np.ndarray,
                     first_rank: int = 0) -> int:
    """The inner degree among ``us`` that minimises the group's forward + backward time."""
    k, n = len(us), len(lengths)
    gb = GroupBatch(seq_len=np.tile(lengths.astype(np.int64), k), seq_group=np.repeat(np.arange(k), n),
                    size=np.full(k, size), ulysses=np.asarray(us), first_rank=np.full(k, first_rank))
    total = cost_model.group_costs(gb).total_s
    return us[int(np.argmin(total))]


def assign_engines(plan: Plan, kind: str, job: JobSpec, cost_model: CostModel, batch: GlobalBatch) -> Plan:
    """``plan`` with every group's engine replaced by the ``kind`` choice (``auto``: the cheapest (u, r) split of
    each group under ``cost_model``, priced for all groups and candidates in one vectorised call on the plan
    flattened against ``batch``, :func:`dcpsim.policies.flatten.flatten`)."""
    check_engine_choice(kind)
    groups = [g for mb in plan.microbatches for g in mb.groups]
    if kind != "auto":
        chosen = [engine_for(kind, g.size, job) for g in groups]
    else:
        fp = flatten(plan, batch)
        options = [ulysses_degrees(g.size, job) for g in groups]
        owner = np.repeat(np.arange(len(groups), dtype=np.int64), [len(us) for us in options])
        us = np.asarray([u for opts in options for u in opts], dtype=np.int64)
        total = cost_model.group_costs(repeat_groups(fp.groups, owner, us)).total_s
        best_u: dict[int, int] = {}
        for cand in np.lexsort((us, total, owner)):  # per group: cheapest, then smaller u
            best_u.setdefault(int(owner[cand]), int(us[cand]))
        chosen = [engine_from_ulysses(g.size, best_u[gi]) for gi, g in enumerate(groups)]
    it = iter(chosen)
    mbs = tuple(Microbatch(tuple(replace(g, engine=next(it)) for g in mb.groups)) for mb in plan.microbatches)
    return replace(plan, microbatches=mbs, meta={**plan.meta, "cp_engine": kind})


def engine_from_ulysses(size: int, u: int) -> Engine:
    """The engine of a group of ``size`` ranks with inner Ulysses degree ``u`` (ring if 1, Ulysses if all)."""
    if u == 1:
        return Engine.for_size("ring", size)
    if u == size:
        return Engine.for_size("ulysses", size)
    return Engine.for_size("hybrid", size, ulysses=u)
