"""WLB-LLM-style packing (``wlb-llm``): one CP degree, variable-length microbatches balanced by work, outliers
spread first (docs/policies/wlb-llm.md).

Follows Wang et al., "WLB-LLM: Workload-Balanced 4D Parallelism for Large Language Model Training"
(OSDI 2025), §4: the pipeline-level imbalance of fixed-length packing is removed by *variable-length
packing*: documents go into microbatches whose token counts may differ (up to the memory limit) so that
every microbatch carries about the same workload W(l) = α·l² + β·l, the attention and the linear FLOPs of a
document; and *outlier delay*: documents much heavier than the average microbatch are held back and
spread so that no microbatch gets two of them. At the CP level WLB-LLM shards every document over all CP
ranks (per-document dual-chunk sharding), which is what the ring engine here does.

Here, for one global batch:

1. CP degree c (``cp_degree``; default: as ``static-cp``, the smallest divisor of the pool whose share of a
   context window fits the per-rank budget M), R = W / c replicas, bin capacity c·M tokens.
2. m microbatches (``num_microbatches``; default: as many as static CP's fixed-length windows need,
   ⌈Σ l / (R · context)⌉, at least what memory needs); B = m·R bins (microbatch k, replica j).
3. W(l) = attention_fwd_flops(l) + l · linear_fwd_flops_per_token (cost_models.flops): α·l² + β·l.
   Outliers: documents with W(l) > ``outlier_factor`` × Σ W / B. They are placed first, heaviest first,
   each into the microbatch holding the fewest outliers so far, in its least-loaded bin (ties: the replica
   with the least work so far), so that neither one microbatch nor one replica collects them.
4. Every other document, heaviest first, goes to the least-loaded bin with room for its tokens (LPT). If
   one does not fit anywhere, m grows by one and packing restarts.

Differences from the paper: the paper delays an outlier to a *later* global batch (a queue across
iterations); a simulator iteration must schedule every sequence of its batch, so outliers are spread over
this batch's microbatches instead. The paper's α, β come from profiling; here from the FLOP counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.flops import attention_fwd_flops, linear_fwd_flops_per_token
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.engines import ENGINE_CHOICES, engine_for
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.opening import fixed_degree, plan_inputs
from dcpsim.policies.plan import CPGroup, Plan, make_plan
from dcpsim.policies.registry import option, register_policy

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

MAX_REPACKS = 64  # microbatches added before giving up (each failure adds one)


def document_work(lengths: np.ndarray, job: JobSpec) -> np.ndarray:
    """W(l) = α·l² + β·l: forward attention FLOPs (causal) plus linear FLOPs of each document, per layer."""
    L = np.asarray(lengths, dtype=np.float64)
    return attention_fwd_flops(L, job.model) + L * linear_fwd_flops_per_token(job.model)


def pack_by_work(work: np.ndarray, tokens: np.ndarray, bins_per_mb: int, m: int, capacity: float,
                 outlier_factor: float) -> list[list[int]] | None:
    """Positions per bin (bin b = microbatch b // R, replica b % R), or None when a document does not fit."""
    B = m * bins_per_mb
    load = np.zeros(B)
    room = np.full(B, float(capacity))
    outliers_in_mb = np.zeros(m, dtype=np.int64)
    bins: list[list[int]] = [[] for _ in range(B)]
    target = float(work.sum()) / B
    order = np.lexsort((np.arange(len(work)), -work))  # heaviest first, ties by position
    is_outlier = work > outlier_factor * target
    for i in [int(i) for i in order if is_outlier[i]] + [int(i) for i in order if not is_outlier[i]]:
        fits = room >= tokens[i]
        if is_outlier[i]:
            # the microbatch with the fewest outliers (then the lowest index) that has a bin with room
            mb_ok = fits.reshape(m, bins_per_mb).any(axis=1)
            if not mb_ok.any():
                return None
            k = int(np.argmin(np.where(mb_ok, outliers_in_mb, np.iinfo(np.int64).max)))
            cand = np.flatnonzero(fits[k * bins_per_mb:(k + 1) * bins_per_mb]) + k * bins_per_mb
            outliers_in_mb[k] += 1
            # the least-loaded bin of that microbatch, ties to the replica with the least work over the whole
            # iteration (its DP finish), then to the lowest
            replica_load = load.reshape(m, bins_per_mb).sum(axis=0)
            b = int(cand[np.lexsort((cand, replica_load[cand % bins_per_mb], load[cand]))[0]])
            bins[b].append(i)
            load[b] += work[i]
            room[b] -= tokens[i]
            continue
        else:
            cand = np.flatnonzero(fits)
            if not cand.size:
                return None
        b = int(cand[np.argmin(load[cand])])
        bins[b].append(i)
        load[b] += work[i]
        room[b] -= tokens[i]
    return bins


@register_policy("wlb-llm")
@dataclass(frozen=True)
class WlbLLM:
    """WLB-LLM-style variable-length packing by work with outliers spread (one CP degree)."""

    cp_degree: int | None = option(None, ge=1)
    num_microbatches: int | None = option(None, ge=1)
    outlier_factor: float = option(2.0, gt=0.0)
    cp_engine: str = option("ring", choices=ENGINE_CHOICES)
    name: ClassVar[str]  # set by @register_policy

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan:
        inp = plan_inputs(self.name, batch, cost_model)
        ids, L, budget = inp.ids, inp.lengths, inp.budget
        c = fixed_degree(self.name, "cp_degree", self.cp_degree, job, budget)
        R, cap = job.pool // c, c * budget
        inp.check_fit(cap, f"over cp_degree × budget = {c} × {budget}; raise cp_degree")
        total = float(L.sum())
        m = self.num_microbatches or max(1, math.ceil(total / (R * job.context_len)), math.ceil(total / (R * cap)))
        work = document_work(L, job)
        for _ in range(MAX_REPACKS):
            bins = pack_by_work(work, L.astype(np.float64), R, m, cap, self.outlier_factor)
            if bins is not None:
                break
            m += 1
        else:
            raise PolicyError(f"wlb-llm: no packing into up to {m} microbatches of {R} bins of {cap} tokens")
        engine = engine_for(self.cp_engine, c, job, cost_model, np.array([job.context_len]))
        mbs = []
        for k in range(m):
            groups = [CPGroup(tuple(range(j * c, (j + 1) * c)), tuple(int(ids[i]) for i in bins[k * R + j]), engine)
                      for j in range(R) if bins[k * R + j]]
            if groups:
                mbs.append(groups)
        return make_plan(self.name, job.pool, mbs, cp_degree=c, max_tokens_per_rank=budget,
                         outliers=int((work > self.outlier_factor * work.sum() / (m * R)).sum()))
