"""What every policy's ``plan()`` starts from: the batch as arrays, the per-rank token budget, the check that
no sequence is longer than the policy's largest group can hold, and for policies with one CP degree that
degree.

The policies used to open ``plan()`` with the same lines each; they now call :func:`plan_inputs` (and
:func:`fixed_degree`), so a message about a sequence too long or a degree that does not divide the pool reads
the same for every policy: ``"<policy>: sequence id 7 has 70000 tokens, <why>"``, ``"<policy>: cp_degree = 3
must divide the pool size 8"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.validate import check_lengths_fit

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch


@dataclass(frozen=True)
class PlanInputs:
    """The batch of one ``plan()`` call as ``int64`` arrays (``ids[i]`` has ``lengths[i]`` tokens, in batch
    order) and the per-rank token budget the plan must honour."""

    policy: str
    ids: np.ndarray
    lengths: np.ndarray
    budget: int

    def check_fit(self, cap: float, reason: str) -> None:
        """:class:`PolicyError` for the first sequence longer than ``cap`` tokens (the most one group of the
        policy can hold): ``"<policy>: sequence id <id> has <L> tokens, <reason>"``."""
        check_lengths_fit(self.policy, self.ids, self.lengths, cap, reason)


def plan_inputs(policy: str, batch: GlobalBatch, cost_model: CostModel,
                budget: int | None = None) -> PlanInputs:
    """The opening of ``plan()``: ``batch``'s ids and lengths, and the budget: ``budget`` where the policy has
    an option that sets it, else ``cost_model.max_tokens_per_rank()`` (what the memory allows)."""
    ids = np.asarray(batch.seq_ids, dtype=np.int64)
    lengths = np.asarray(batch.lengths, dtype=np.int64)
    return PlanInputs(policy, ids, lengths, int(cost_model.max_tokens_per_rank() if budget is None else budget))


def default_degree(job: JobSpec, budget: int) -> int:
    """The smallest divisor c of the pool with context_len / c ≤ the per-rank budget."""
    for c in range(1, job.pool + 1):
        if job.pool % c == 0 and job.context_len / c <= budget:
            return c
    raise InfeasibleError(f"a context window of {job.context_len} tokens does not fit even on the whole pool "
                          f"of {job.pool} ranks at {budget} tokens per rank")


def fixed_degree(policy: str, option: str, degree: int | None, job: JobSpec, budget: int) -> int:
    """The one CP degree of a policy that runs every group at the same size: its option ``option`` =
    ``degree``, or None for :func:`default_degree`. One that does not divide the pool is a
    :class:`PolicyError`."""
    c = degree or default_degree(job, budget)
    if job.pool % c:
        raise PolicyError(f"{policy}: {option} = {c} must divide the pool size {job.pool}")
    return c
