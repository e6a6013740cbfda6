"""The plan validator (docs/architecture.md, "Plans and their invariants"): every policy's output goes through
it in tests and in the CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.ulysses import ulysses_problem
from dcpsim.policies.errors import PlanError, PolicyError
from dcpsim.policies.plan import Plan

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

_EPS = 1e-9


def check_lengths_fit(policy: str, ids: np.ndarray, lengths: np.ndarray, cap: float, reason: str) -> None:
    """Raise :class:`PolicyError` for the first sequence longer than ``cap`` tokens (the most one group of the
    policy can hold): ``"<policy>: sequence id <id> has <L> tokens, <reason>"``."""
    over = np.flatnonzero(np.asarray(lengths) > cap)
    if over.size:
        i = int(over[0])
        raise PolicyError(f"{policy}: sequence id {int(ids[i])} has {int(lengths[i])} tokens, {reason}")


def validate_plan(plan: Plan, batch: GlobalBatch, *, max_tokens_per_rank: float | None = None,
                  kv_heads_per_rank: int | None = None, heads_per_rank: int | None = None,
                  pool_size: int | None = None) -> None:
    """Raise :class:`PlanError` naming the first broken invariant; return None for a valid plan.

    Checks: the plan's pool is the job's (``pool_size``, when given: a plan over more ranks than the job has
    would be priced on GPUs that do not exist, one over fewer leaves ranks idle that the job pays for); every
    microbatch holds at least one sequence; every sequence of the batch appears exactly once and no unknown
    id appears; groups of a microbatch are disjoint and use only ranks ``0..W-1``; engine sizes multiply to
    the group size; the Ulysses degree is valid (cost_models.ulysses.ulysses_problem, the rule the bound and the
    planners read: it divides the (KV) heads per rank, each checked when given; a degree wider than an NVLink
    domain is valid, priced across domains, and never offered by a planner); per-rank tokens (Σ L / degree over
    the rank's groups in one microbatch) stay within ``max_tokens_per_rank``.

    Groups need not be contiguous: a group of ranks 0 and 8 is valid, and the cost model prices it by the
    NVLink domains it spans (cost_models.topology: its ring and inner Ulysses groups by the ranks they
    connect). The one constraint of the real engine that is not checked here is the order of an inner
    Ulysses group's ranks (torch orders a process group by global rank): real_runtime.group_pool rejects a
    group whose inner groups are not ascending, with that reason, before running anything.
    """
    W = plan.pool_size
    if W < 1:
        raise PlanError(f"plan.pool_size = {W} must be ≥ 1")
    if pool_size is not None and W != pool_size:
        raise PlanError(f"the plan is for a pool of {W} ranks but the job has {pool_size}; "
                        f"expected a plan over exactly {pool_size} ranks")
    length_of = dict(zip(np.asarray(batch.seq_ids).tolist(), np.asarray(batch.lengths).tolist()))
    seen: dict[int, int] = {}
    for k, mb in enumerate(plan.microbatches):
        if not any(g.seq_ids for g in mb.groups):
            raise PlanError(f"microbatch {k} holds no sequence ({len(mb.groups)} group(s), all empty); "
                            "expected every microbatch to hold at least one sequence")
        rank_tokens = np.zeros(W)
        used = np.zeros(W, dtype=bool)
        for j, g in enumerate(mb.groups):
            where = f"microbatch {k}, group {j}"
            if g.size == 0:
                raise PlanError(f"{where}: a group has no ranks")
            if len(set(g.ranks)) != g.size:
                raise PlanError(f"{where}: ranks {g.ranks} repeat a rank")
            for r in g.ranks:
                if not 0 <= r < W:
                    raise PlanError(f"{where}: rank {r} is outside the pool 0..{W - 1}")
                if used[r]:
                    raise PlanError(f"{where}: rank {r} is already in another group of this microbatch "
                                    "(groups must be disjoint)")
                used[r] = True
            if g.engine.size != g.size:
                raise PlanError(f"{where}: engine {g.engine} has size {g.engine.size} "
                                f"(ulysses {g.engine.ulysses} x ring {g.engine.ring}) but the group has "
                                f"{g.size} ranks")
            bad = ulysses_problem(g.engine.ulysses, kv_heads_per_rank, heads_per_rank)
            if bad is not None:
                raise PlanError(f"{where}: {bad}")
            total = 0
            for s in g.seq_ids:
                if s not in length_of:
                    raise PlanError(f"{where}: sequence id {s} is not in the batch")
                if s in seen:
                    raise PlanError(f"{where}: sequence id {s} is duplicated (already in microbatch {seen[s]})")
                seen[s] = k
                total += length_of[s]
            rank_tokens[list(g.ranks)] += total / g.size
        if max_tokens_per_rank is not None:
            worst = int(np.argmax(rank_tokens))
            if rank_tokens[worst] > max_tokens_per_rank * (1 + _EPS):
                raise PlanError(f"microbatch {k}: rank {worst} holds {rank_tokens[worst]:.0f} tokens, over the "
                                f"memory budget of {max_tokens_per_rank} tokens per rank")
    missing = [s for s in length_of if s not in seen]
    if missing:
        raise PlanError(f"{len(missing)} sequence(s) of the batch are missing from the plan, e.g. id {missing[0]}")
