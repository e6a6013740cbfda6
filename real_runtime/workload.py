"""What the runner executes: global batches and their plans, per iteration, serialisable to JSON.

A :class:`Workload` is one policy's run: a label and one :class:`Step` (the batch's sequence ids and lengths,
and the policy's :class:`~policies.plan.Plan` for it) per iteration. Workloads travel to worker processes as
JSON, so that every process executes the same plans.

:func:`synthetic_batches` draws short documents (lognormal lengths, cut at the context length) into batches
of a token budget, for runs on small hardware; :func:`plan_workload` plans batches with a registered policy
and checks every plan with the validator. (``real_runtime`` does not import ``traces``; any object with
``seq_ids`` and ``lengths`` arrays serves as a batch.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.policies import Plan, create_policy, validate_plan
from dcpsim.policies.plan import BatchLike


@dataclass(frozen=True, eq=False)
class Batch:
    """A global batch: sequence ids and lengths (int64), one iteration's worth."""

    seq_ids: np.ndarray
    lengths: np.ndarray

    @staticmethod
    def of(seq_ids: Sequence[int], lengths: Sequence[int]) -> Batch:
        ids = np.asarray(seq_ids, dtype=np.int64)
        lens = np.asarray(lengths, dtype=np.int64)
        if ids.shape != lens.shape or ids.ndim != 1 or ids.size == 0 or lens.min() < 1:
            raise ValueError(f"a batch needs equally long, non-empty seq_ids and lengths ≥ 1; got "
                             f"{ids.size} ids and lengths {lens.tolist()[:8]}...")
        return Batch(ids, lens)

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())


@dataclass(frozen=True, eq=False)
class Step:
    """One iteration: the batch and the plan that runs it."""

    seq_ids: tuple[int, ...]
    lengths: tuple[int, ...]
    plan: Plan

    @staticmethod
    def of(batch: BatchLike, plan: Plan) -> Step:
        return Step(tuple(int(s) for s in np.asarray(batch.seq_ids)),
                    tuple(int(n) for n in np.asarray(batch.lengths)), plan)

    @property
    def batch(self) -> Batch:
        return Batch.of(self.seq_ids, self.lengths)

    def length_of(self) -> dict[int, int]:
        return dict(zip(self.seq_ids, self.lengths))

    def to_dict(self) -> dict[str, Any]:
        return {"seq_ids": list(self.seq_ids), "lengths": list(self.lengths), "plan": self.plan.to_dict()}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Step:
        return Step(tuple(int(s) for s in d["seq_ids"]), tuple(int(n) for n in d["lengths"]),
                    Plan.from_dict(d["plan"]))


@dataclass(frozen=True, eq=False)
class Workload:
    """One labelled run: a step per iteration."""

    label: str
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError(f"workload {self.label!r} has no steps")
        pools = {s.plan.pool_size for s in self.steps}
        if len(pools) != 1:
            raise ValueError(f"workload {self.label!r} mixes plans for pools of {sorted(pools)} ranks")

    @property
    def pool_size(self) -> int:
        return self.steps[0].plan.pool_size

    @property
    def plans(self) -> list[Plan]:
        return [s.plan for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "steps": [s.to_dict() for s in self.steps]}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Workload:
        return Workload(str(d["label"]), tuple(Step.from_dict(s) for s in d["steps"]))


def synthetic_batches(iterations: int, tokens: int, context_len: int, *, median_len: float = 256.0,
                      sigma: float = 1.0, seed: int = 0) -> list[Batch]:
    """``iterations`` batches of about ``tokens`` tokens each: document lengths lognormal (median
    ``median_len``, log-standard-deviation ``sigma``), at least 2 and at most ``context_len`` tokens; each
    batch takes documents until the next one would overflow the budget (at least one document). Sequence
    ids run on across batches. Deterministic in all arguments."""
    if iterations < 1 or tokens < 2 or context_len < 2:
        raise ValueError(f"synthetic_batches: iterations ({iterations}) ≥ 1, tokens ({tokens}) ≥ 2 and "
                         f"context_len ({context_len}) ≥ 2 required")
    rng = np.random.default_rng(int(seed))
    out, next_id = [], 0
    pending: list[int] = []
    for _ in range(iterations):
        lens: list[int] = []
        while True:
            if not pending:
                draw = rng.lognormal(math.log(median_len), sigma, size=256)
                pending = np.clip(np.rint(draw), 2, context_len).astype(np.int64).tolist()
            nxt = pending[0]
            if lens and sum(lens) + nxt > tokens:
                break
            lens.append(pending.pop(0))
        out.append(Batch.of(range(next_id, next_id + len(lens)), lens))
        next_id += len(lens)
    return out


def plan_workload(policy: str, batches: Iterable[BatchLike], cost_model: CostModel,
                  options: Mapping[str, Any] | None = None, label: str | None = None) -> Workload:
    """Plan every batch with registered policy ``policy`` (``options`` passed on) and validate each plan
    against the job's memory budget (unless the plan says it does not check memory) and head counts."""
    pol = create_policy(policy, **dict(options or {}))
    job = cost_model.job
    steps = []
    budget = cost_model.max_tokens_per_rank()
    for b in batches:
        plan = pol.plan(b, job, cost_model)
        # A policy that does not honour the budget (upstream's legacy scheduler) says so in the plan's meta.
        limit = plan.meta.get("max_tokens_per_rank", budget) if plan.meta.get("memory_checked", True) else None
        validate_plan(plan, b, max_tokens_per_rank=limit, kv_heads_per_rank=job.kv_heads_per_rank,
                      heads_per_rank=job.heads_per_rank)
        steps.append(Step.of(b, plan))
    return Workload(label or policy, tuple(steps))
