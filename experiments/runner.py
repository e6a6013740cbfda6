"""Running policies over a scenario's global batches: plan (timed), validate, simulate, aggregate
(:func:`run_policy`); one policy on a scenario (:func:`simulate_policy`, ``dcpsim simulate``) and several on
the same batches (:func:`compare_policies`, ``dcpsim compare``).

``PolicySpec`` and ``parse_policy_specs`` live in :mod:`policies.spec` and are re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dcpsim.cost_models.base import CostModel
from dcpsim.experiments.scenario.definition import Scenario
from dcpsim.policies import Policy, create_policy, validate_plan
from dcpsim.policies.registry import policy_options
from dcpsim.policies.spec import PolicySpec, parse_policy_specs
from dcpsim.sim.bound import BoundCache
from dcpsim.sim.metric_spec import aggregate, without_wall_clock
from dcpsim.sim.metrics import METRIC_NAMES, Metrics
from dcpsim.sim.simulate import IterationResult, simulate_plan

__all__ = ["Comparison", "PolicyRun", "PolicySpec", "RunSummary", "build_policy", "compare_policies",
           "memory_warning", "parse_policy_specs", "run_policy", "simulate_policy"]

Bars = Callable[[str, int], Callable[[int], None]]  # (policy label, batches) -> progress(done)


def build_policy(spec: PolicySpec, common: dict[str, Any] | None = None) -> Policy:
    """Instantiate ``spec``; ``common`` options (from global flags) go to the policies that take them."""
    accepted = policy_options(spec.name)
    opts = {k: v for k, v in (common or {}).items() if k in accepted and v is not None}
    opts.update(spec.options)
    return create_policy(spec.name, **opts)


@dataclass(frozen=True)
class RunSummary:
    """One policy's metrics over a run: ``metrics`` holds every declared metric aggregated over the
    iterations as its declaration says (``sim.metrics.Metrics``: throughput = Σ tokens / Σ time, bubbles and
    MFU averaged, skew and memory maxima, ...)."""

    policy: str  # the policy's label
    metrics: Metrics
    iterations: int
    num_gpus: int
    gpu_memory_gib: float

    @property
    def fits_memory(self) -> bool:
        """Whether the largest per-rank memory of the run fits the GPU (1e-9 relative slack)."""
        return self.metrics.peak_memory_gib <= self.gpu_memory_gib * (1 + 1e-9)

    def without_timings(self) -> RunSummary:
        """The summary with its wall-clock metrics (scheduling time) set to 0.0: reproducible output."""
        return replace(self, metrics=without_wall_clock(self.metrics))

    def to_dict(self) -> dict[str, Any]:
        """``--json``'s and the sweep's record: the label, every declared metric, ``fits_memory``."""
        return {"policy": self.policy, **self.metrics.to_dict(), "fits_memory": self.fits_memory}

    @staticmethod
    def columns() -> tuple[str, ...]:
        """The keys of :meth:`to_dict`, in order, without a summary at hand (a failed sweep point's row)."""
        return ("policy", *METRIC_NAMES, "fits_memory")


@dataclass(frozen=True)
class PolicyRun:
    spec: PolicySpec
    iterations: tuple[IterationResult, ...]
    num_gpus: int
    gpu_memory_gib: float

    def summary(self, timings: bool = True) -> RunSummary:
        """Every metric aggregated over the iterations; the scheduling time is 0.0 unless ``timings``."""
        s = RunSummary(self.spec.label, aggregate([r.metrics for r in self.iterations], self.num_gpus),
                       len(self.iterations), self.num_gpus, self.gpu_memory_gib)
        return s if timings else s.without_timings()


def memory_warning(summary: RunSummary) -> str | None:
    """A one-line warning when a policy's plan needs more memory than the GPU has."""
    if summary.fits_memory:
        return None
    return (f"warning: {summary.policy} needs {summary.metrics.peak_memory_gib:.1f} GiB on some rank, more than "
            f"the GPU's {summary.gpu_memory_gib:.1f} GiB: the plan is infeasible on this hardware")


def run_policy(spec: PolicySpec, batches: Sequence[Any], cost_model: CostModel,
               common: dict[str, Any] | None = None,
               progress: Callable[[int], None] | None = None,
               bound_cache: BoundCache | None = None) -> PolicyRun:
    """Plan every batch with the policy (timing the planning), validate each plan, simulate it (``bound_cache``:
    share the batches' lower bounds between the policies of one comparison)."""
    policy = build_policy(spec, common)
    job = cost_model.job
    budget = cost_model.max_tokens_per_rank()
    out = []
    for i, batch in enumerate(batches):
        t0 = time.perf_counter()
        plan = policy.plan(batch, job, cost_model)
        sched = time.perf_counter() - t0
        # Checked against the cost model's budget, never the one a plan's metadata claims (a policy could inflate
        # it). A policy that does not honour any budget (upstream's legacy scheduler) says so in its meta; its
        # plans are then held to no budget, and sim.bound bounds them without one (the bound checks the plan).
        limit = budget if plan.meta.get("memory_checked", True) else None
        validate_plan(plan, batch, max_tokens_per_rank=limit,
                      kv_heads_per_rank=job.kv_heads_per_rank, heads_per_rank=job.heads_per_rank, pool_size=job.pool)
        out.append(simulate_plan(plan, batch, cost_model, scheduling_time_s=sched, bound_cache=bound_cache))
        if progress:
            progress(i + 1)
    return PolicyRun(spec, tuple(out), job.num_gpus, job.gpu.hbm_gb * 1e9 / (1 << 30))


def simulate_policy(sc: Scenario, policy: str, bars: Bars | None = None,
                    warn: Callable[[str], None] | None = None) -> tuple[Scenario, PolicyRun]:
    """One policy (``name[:k=v...]``) over the scenario's batches; the scenario comes back with that policy as
    its only one (what ``--json`` reports). ``bars(label, batches)`` makes the progress callback; ``warn``
    receives the long-run warning (:mod:`experiments.runtime_estimate`) before the run starts."""
    from dcpsim.experiments.runtime_estimate import long_run_warning

    spec = parse_policy_specs(policy)[0]
    sc = sc.with_(policies=(spec.label,))
    batches = sc.batches()
    message = long_run_warning([len(b.lengths) for b in batches], [spec.label])
    if message and warn:
        warn(message)
    run = run_policy(spec, batches, sc.cost_model(), sc.policy_options,
                     progress=bars(spec.label, len(batches)) if bars else None)
    return sc, run


@dataclass(frozen=True)
class Comparison:
    """Several policies on the same global batches: the scenario (its ``policies`` the labels compared), the
    number of batches, and each policy's summary (measured scheduling times included)."""

    scenario: Scenario
    batches: int
    summaries: tuple[RunSummary, ...]
    warnings: tuple[str, ...] = ()  # what the run did not do as asked (one line each; also in --json)


def compare_policies(sc: Scenario, policies: str | None = None, bars: Bars | None = None,
                     warn: Callable[[str], None] | None = None) -> Comparison:
    """Run every policy of ``policies`` (``a,b:k=v,...``; default the scenario's own) on the scenario's
    batches, sharing one lower bound per batch between them. ``warn`` receives each policy's memory warning as soon as
    its run ends; ``bars(label, batches)`` makes each policy's progress callback. A run estimated to take long
    (:mod:`experiments.runtime_estimate`) is announced to ``warn`` before it starts, and after each policy but
    the last ``warn`` hears the time so far and the estimate of what is left."""
    from dcpsim.experiments.runtime_estimate import duration, long_run_warning, run_seconds

    specs = parse_policy_specs(",".join(sc.policies) if policies is None else policies)
    sc = sc.with_(policies=tuple(s.label for s in specs))
    cost_model = sc.cost_model()
    batches = sc.batches()
    notes = []
    if len(batches) < sc.iterations:
        notes.append(f"the trace {sc.trace} holds {len(batches)} global batch(es): ran {len(batches)} of the "
                     f"{sc.iterations} iterations asked")
    for note in notes:
        if warn:
            warn(f"warning: {note}")
    sizes = [len(b.lengths) for b in batches]
    long_run = long_run_warning(sizes, [s.label for s in specs])
    if long_run and warn:
        warn(long_run)
    estimates = [run_seconds(sizes, [s.label]) for s in specs]
    summaries = []
    bounds = BoundCache()  # every policy sees the same batches: one bound per batch
    spent = 0.0
    for i, spec in enumerate(specs):
        t0 = time.perf_counter()
        pr = run_policy(spec, batches, cost_model, sc.policy_options,
                        progress=bars(spec.label, len(batches)) if bars else None, bound_cache=bounds)
        spent += time.perf_counter() - t0
        if long_run and warn and i + 1 < len(specs):   # progress of a long run, with the estimate of the rest
            warn(f"{spec.label} done ({duration(spent)} so far); {duration(sum(estimates[i + 1:]))} left for "
                 f"{', '.join(s.label for s in specs[i + 1:])} (estimate)")
        summaries.append(pr.summary(timings=True))
        message = memory_warning(summaries[-1])
        if message and warn:
            warn(message)
    return Comparison(sc, len(batches), tuple(summaries), tuple(notes))
