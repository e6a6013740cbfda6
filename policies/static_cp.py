"""Static CP (docs/policies/static-cp.md): one CP degree c for every sequence.

The pool is W / c data-parallel replicas. Documents, in data order, are packed first-fit into context windows
of the job's context length (documents never exceed it: batching already cut longer ones); windows are dealt to
the replicas round-robin and each replica runs its windows as its microbatches, so microbatch k holds windows
k·R .. k·R + R − 1 on replicas 0 .. R − 1 (the last microbatch may leave replicas idle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.engines import ENGINE_CHOICES, engine_for
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.opening import fixed_degree, plan_inputs
from dcpsim.policies.plan import CPGroup, Plan, make_plan
from dcpsim.policies.registry import option, register_policy

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch


def pack_first_fit(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Positions of ``lengths`` packed first-fit, in order, into bins of ``capacity`` tokens."""
    room = np.empty(0, dtype=np.int64)
    bins: list[list[int]] = []
    for i, L in enumerate(lengths.tolist()):
        if L > capacity:
            raise PolicyError(f"sequence at position {i} has {L} tokens, longer than the context window "
                              f"{capacity}; cut documents at the context length first")
        fits = np.flatnonzero(room >= L)
        if fits.size:
            b = int(fits[0])
            room[b] -= L
            bins[b].append(i)
        else:
            room = np.append(room, capacity - L)
            bins.append([i])
    return bins


@register_policy("static-cp")
@dataclass(frozen=True)
class StaticCP:
    """Fixed CP degree for all sequences; documents packed into context windows."""

    cp_degree: int | None = option(None, ge=1)  # None: the smallest divisor of the pool that fits
    cp_engine: str = option("ring", choices=ENGINE_CHOICES)
    name: ClassVar[str]  # set by @register_policy

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan:
        inp = plan_inputs(self.name, batch, cost_model)
        budget = inp.budget
        c = fixed_degree(self.name, "cp_degree", self.cp_degree, job, budget)
        if job.context_len / c > budget:
            raise InfeasibleError(f"cp_degree = {c}: a context window of {job.context_len} tokens puts "
                                  f"{job.context_len / c:.0f} tokens on a rank, over the budget of {budget}")
        ids = inp.ids
        windows = pack_first_fit(inp.lengths, job.context_len)
        replicas = job.pool // c
        engine = engine_for(self.cp_engine, c, job, cost_model, np.array([job.context_len]))
        mbs = []
        for k in range(0, len(windows), replicas):
            mbs.append([CPGroup(tuple(range(j * c, (j + 1) * c)), tuple(int(ids[i]) for i in w), engine)
                        for j, w in enumerate(windows[k:k + replicas])])
        return make_plan(self.name, job.pool, mbs, cp_degree=c, max_tokens_per_rank=budget,
                         windows=len(windows))
