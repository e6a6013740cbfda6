"""What the runner executes: global batches and their plans, per iteration, serialisable to JSON.

A :class:`Workload` is one policy's run: a label and one :class:`Step` (the iteration's
:class:`~dcpsim.traces.batching.GlobalBatch` and the policy's :class:`~dcpsim.policies.plan.Plan` for it) per
iteration. Workloads travel to worker processes as JSON, so that every process executes the same plans.

:func:`synthetic_batches` draws short documents (lognormal lengths, cut at the context length) into batches
of a token budget, for runs on small hardware; :func:`plan_workload` plans batches with a registered policy
and checks every plan with the validator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.policies import Plan, create_policy, validate_plan
from dcpsim.traces.batching import GlobalBatch


@dataclass(frozen=True, eq=False)
class Step:
    """One iteration: the global batch and the plan that runs it."""

    batch: GlobalBatch
    plan: Plan

    def length_of(self) -> dict[int, int]:
        """Length in tokens of every sequence id of the batch."""
        return dict(zip(self.batch.seq_ids.tolist(), self.batch.lengths.tolist()))

    def to_dict(self) -> dict[str, Any]:
        b = self.batch
        return {"step": b.step, "seq_ids": b.seq_ids.tolist(), "lengths": b.lengths.tolist(),
                "plan": self.plan.to_dict()}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Step:
        batch = GlobalBatch.of(d["lengths"], ids=d["seq_ids"], step=int(d.get("step", 0)))
        return Step(batch, Plan.from_dict(d["plan"]))


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
                      sigma: float = 1.0, seed: int = 0) -> list[GlobalBatch]:
    """``iterations`` batches of about ``tokens`` tokens each: document lengths lognormal (median
    ``median_len``, log-standard-deviation ``sigma``), at least 2 and at most ``context_len`` tokens; each
    batch takes documents until the next one would overflow the budget (at least one document). Sequence
    ids run on across batches; batch ``i`` has step ``i``. Deterministic in all arguments."""
    if iterations < 1 or tokens < 2 or context_len < 2:
        raise ValueError(f"synthetic_batches: iterations ({iterations}) ≥ 1, tokens ({tokens}) ≥ 2 and "
                         f"context_len ({context_len}) ≥ 2 required")
    rng = np.random.default_rng(int(seed))
    out, next_id = [], 0
    pending: list[int] = []
    for i in range(iterations):
        lens: list[int] = []
        while True:
            if not pending:
                draw = rng.lognormal(math.log(median_len), sigma, size=256)
                pending = np.clip(np.rint(draw), 2, context_len).astype(np.int64).tolist()
            nxt = pending[0]
            if lens and sum(lens) + nxt > tokens:
                break
            lens.append(pending.pop(0))
        out.append(GlobalBatch.of(lens, np.arange(next_id, next_id + len(lens)), step=i))
        next_id += len(lens)
    return out


def plan_workload(policy: str, batches: Iterable[GlobalBatch], cost_model: CostModel,
                  options: Mapping[str, Any] | None = None, label: str | None = None) -> Workload:
    """Plan every batch with registered policy ``policy`` (``options`` passed on) and validate each plan
    against the job's memory budget (unless the plan says it does not check memory) and head counts."""
    pol = create_policy(policy, **dict(options or {}))
    job = cost_model.job
    steps = []
    budget = cost_model.max_tokens_per_rank()
    for b in batches:
        plan = pol.plan(b, job, cost_model)
        # Checked against the cost model's budget, never one a plan states about itself (as experiments.runner
        # does); a policy that does not honour the budget (upstream's legacy scheduler) says so in its meta.
        limit = budget if plan.meta.get("memory_checked", True) else None
        validate_plan(plan, b, max_tokens_per_rank=limit, kv_heads_per_rank=job.kv_heads_per_rank,
                      heads_per_rank=job.heads_per_rank, pool_size=job.pool)
        steps.append(Step(b, plan))
    return Workload(label or policy, tuple(steps))
