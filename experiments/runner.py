"""Running policies over a scenario's global batches: plan (timed), validate, simulate, aggregate.

``PolicySpec`` and ``parse_policy_specs`` live in :mod:`policies.spec` and are re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.policies import Policy, create_policy, validate_plan
from dcpsim.policies.registry import policy_options
from dcpsim.policies.spec import PolicySpec, parse_policy_specs
from dcpsim.sim.simulate import IterationResult, simulate_plan

__all__ = ["PolicyRun", "PolicySpec", "build_policy", "memory_warning", "parse_policy_specs", "run_policy"]


def build_policy(spec: PolicySpec, common: dict[str, Any] | None = None) -> Policy:
    """Instantiate ``spec``; ``common`` options (from global flags) go to the policies that take them."""
    accepted = policy_options(spec.name)
    opts = {k: v for k, v in (common or {}).items() if k in accepted and v is not None}
    opts.update(spec.options)
    return create_policy(spec.name, **opts)


@dataclass(frozen=True)
class PolicyRun:
    spec: PolicySpec
    iterations: tuple[IterationResult, ...]
    num_gpus: int
    gpu_memory_gib: float

    def summary(self, timings: bool = True) -> dict[str, Any]:
        """Metrics over all iterations: throughput = Σ tokens / Σ time; bubbles and MFU averaged over
        iterations; skew and memory maxima; scheduling time averaged (0.0 unless ``timings``)."""
        ms = [r.metrics for r in self.iterations]
        T = sum(m.iteration_time_s for m in ms)
        tok = sum(m.tokens for m in ms)

        def mean(attr: str) -> float:
            return float(np.mean([getattr(m, attr) for m in ms]))

        return {
            "policy": self.spec.label,
            "iteration_time_s": T / len(ms),
            "tokens_per_s": tok / T,
            "tokens_per_s_per_gpu": tok / T / self.num_gpus,
            "mfu": mean("mfu"),
            "pipeline_bubble": mean("pipeline_bubble"),
            "pipeline_bubble_max": max(m.pipeline_bubble_max for m in ms),
            "dp_bubble": mean("dp_bubble"),
            "dp_bubble_max": max(m.dp_bubble_max for m in ms),
            "microbatch_skew_max": max(m.microbatch_skew_max for m in ms),
            "microbatch_skew_mean": mean("microbatch_skew_mean"),
            "same_tokens_time_ratio": max(m.same_tokens_time_ratio for m in ms),
            "cp_comm_s": mean("cp_comm_s"),
            "pp_comm_s": mean("pp_comm_s"),
            "dp_comm_s": mean("dp_comm_s"),
            "num_microbatches": mean("num_microbatches"),
            "scheduling_time_s": mean("scheduling_time_s") if timings else 0.0,
            "peak_memory_gib": max(m.peak_memory_gib for m in ms),
            "fits_memory": max(m.peak_memory_gib for m in ms) <= self.gpu_memory_gib * (1 + 1e-9),
        }


def memory_warning(summary: dict[str, Any], gpu_memory_gib: float) -> str | None:
    """A one-line warning when a policy's plan needs more memory than the GPU has."""
    if summary.get("fits_memory", True):
        return None
    return (f"warning: {summary['policy']} needs {summary['peak_memory_gib']:.1f} GiB on some rank, more than the "
            f"GPU's {gpu_memory_gib:.1f} GiB: the plan is infeasible on this hardware")


def run_policy(spec: PolicySpec, batches: Sequence[Any], cost_model: CostModel,
               common: dict[str, Any] | None = None,
               progress: Callable[[int], None] | None = None) -> PolicyRun:
    """Plan every batch with the policy (timing the planning), validate each plan, simulate it."""
    policy = build_policy(spec, common)
    job = cost_model.job
    budget = cost_model.max_tokens_per_rank()
    out = []
    for i, batch in enumerate(batches):
        t0 = time.perf_counter()
        plan = policy.plan(batch, job, cost_model)
        sched = time.perf_counter() - t0
        # A plan whose policy does not honour the budget (upstream's legacy scheduler) says so in its meta.
        limit = plan.meta.get("max_tokens_per_rank", budget) if plan.meta.get("memory_checked", True) else None
        validate_plan(plan, batch, max_tokens_per_rank=limit,
                      kv_heads_per_rank=job.kv_heads_per_rank, heads_per_rank=job.heads_per_rank)
        out.append(simulate_plan(plan, batch, cost_model, scheduling_time_s=sched))
        if progress:
            progress(i + 1)
    return PolicyRun(spec, tuple(out), job.num_gpus, job.gpu.hbm_gb * 1e9 / (1 << 30))
