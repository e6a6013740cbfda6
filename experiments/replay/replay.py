"""Replay a run log: simulate exactly each logged iteration's placement and compare with its measured time.

No policy is involved: every logged microbatch becomes one microbatch of a :class:`Plan` whose CP groups hold
the logged documents on the logged ranks with the logged engine, and :func:`dcpsim.sim.simulate.simulate_plan`
prices it with the analytic cost model of the logged job. The simulated iteration is what the simulator always
simulates: forward and backward of every microbatch (1F1B over PP stages), the DP wait, the gradient
reduce-scatter and parameter all-gather (distributed optimizer) and the optimizer step. A job logged with
``"grad_sync": false`` measured no gradient reduction (DistCA's harness sets no ``finalize_model_grads_func``):
its replay leaves the reduce-scatter out (:func:`predict`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dcpsim.cost_models import (
    AnalyticCostModel,
    Calibration,
    JobSpec,
    ModelSpec,
    SpecError,
    get_gpu,
    get_model,
)
from dcpsim.experiments.replay.runlog import Iteration, LogError, RunLog
from dcpsim.policies.errors import PlanError
from dcpsim.policies.plan import CPGroup, Engine, Plan, make_plan
from dcpsim.policies.validate import validate_plan
from dcpsim.sim.simulate import simulate_plan
from dcpsim.traces.batching import GlobalBatch


@dataclass(frozen=True)
class Replayed:
    """One iteration: measured and predicted seconds, and the predicted parts the metrics report."""

    step: int
    measured_s: float
    predicted_s: float
    tokens: int
    tp_comm_s: float
    cp_comm_s: float
    dp_comm_s: float

    @property
    def error(self) -> float:
        """predicted ÷ measured − 1."""
        return self.predicted_s / self.measured_s - 1.0


def job_of(log: RunLog, origin: str = "run log") -> JobSpec:
    """The JobSpec of the logged job (model cut to ``layers`` when given; pool = dp × cp)."""
    j = log.job
    try:
        model = ModelSpec(**j["model"]) if isinstance(j["model"], dict) else get_model(j["model"])
        gpu = get_gpu(j["gpu"])
    except TypeError as e:
        raise LogError(f"{origin}: job.model: {e}; expected ModelSpec fields") from None
    except SpecError as e:
        raise LogError(f"{origin}: job: {e}") from None
    if j.get("layers"):
        model = replace(model, layers=int(j["layers"]), name=f"{model.name}-{int(j['layers'])}l")
    longest = max((sum(g.docs) // len(g.ranks) for it in log.iterations for mb in it.microbatches
                   for g in mb), default=1)
    per_iter = max(it.tokens for it in log.iterations)
    try:
        return JobSpec(model=model, gpu=gpu, tp=j["tp"], pp=j["pp"], pool=log.pool, ep=j["ep"],
                       context_len=max(longest, 1), global_batch_tokens=max(per_iter, 1),
                       tp_comm_overlap=float(j.get("tp_comm_overlap", 0.0)),
                       attention_backend=j.get("attention_backend"))
    except SpecError as e:
        raise LogError(f"{origin}: job: {e}") from None


def cost_model_of(log: RunLog, calibration: Calibration | None = None, origin: str = "run log") -> AnalyticCostModel:
    return AnalyticCostModel(job_of(log, origin), calibration)


def plan_of(it: Iteration, pool: int) -> tuple[Plan, GlobalBatch]:
    """The logged placement of one iteration as a plan over a batch (sequence ids in log order)."""
    lengths: list[int] = []
    mbs = []
    for mb in it.microbatches:
        groups = []
        for g in mb:
            ids = tuple(range(len(lengths), len(lengths) + len(g.docs)))
            lengths.extend(g.docs)
            groups.append(CPGroup(g.ranks, ids, Engine.parse(g.engine, len(g.ranks))))
        mbs.append(groups)
    return make_plan("replay", pool, mbs), GlobalBatch.of(lengths, step=it.step)


def check_log(log: RunLog, cost_model: AnalyticCostModel, origin: str = "run log") -> None:
    """Every iteration's placement is a valid plan whose ranks hold no more tokens than the memory allows."""
    budget = cost_model.max_tokens_per_rank()
    job = cost_model.job
    for it in log.iterations:
        try:
            plan, batch = plan_of(it, log.pool)
            validate_plan(plan, batch, max_tokens_per_rank=budget, kv_heads_per_rank=job.kv_heads_per_rank,
                          heads_per_rank=job.heads_per_rank, pool_size=job.pool)
        except PlanError as e:
            raise LogError(f"{origin}: iteration {it.step}: {e} ({job.model.name} on {job.gpu.name} at TP{job.tp} "
                           f"PP{job.pp})") from None


def replay(log: RunLog, calibration: Calibration | None = None, origin: str = "run log",
           check: bool = True) -> list[Replayed]:
    """Predicted against measured time of every iteration of ``log``."""
    cm = cost_model_of(log, calibration, origin)
    if check:
        check_log(log, cm, origin)
    return replay_with(log, cm)


def reduce_scatter_share(cost_model: AnalyticCostModel) -> float:
    """The reduce-scatter's share of the simulated DP sync (gradient reduce-scatter + parameter all-gather of
    the same bytes over the same ranks): 1/2 when the two link models are equal (both shipped calibrations'
    network entries, where a DP pool across nodes syncs), else the bandwidth-bound share."""
    job = cost_model.job
    link = "network" if job.pool * job.tp > job.gpu.nvlink_domain else "nvlink"
    rs, ag = cost_model.cal.link("reduce_scatter", link), cost_model.cal.link("all_gather", link)
    if rs == ag:
        return 0.5
    return (1 / rs.busbw_gbs) / (1 / rs.busbw_gbs + 1 / ag.busbw_gbs)


def predict(log: RunLog, it: Iteration, cost_model: AnalyticCostModel) -> tuple[float, Any]:
    """(predicted seconds, the simulation's metrics) of one iteration: the simulated iteration, less the
    gradient reduce-scatter when the log says the measured step had none (``job.grad_sync`` false)."""
    plan, batch = plan_of(it, log.pool)
    m = simulate_plan(plan, batch, cost_model).metrics
    t = float(m.iteration_time_s)
    if not log.job.get("grad_sync", True):
        t -= float(m.dp_comm_s) * reduce_scatter_share(cost_model)
    return t, m


def replay_with(log: RunLog, cost_model: AnalyticCostModel) -> list[Replayed]:
    out = []
    for it in log.iterations:
        t, m = predict(log, it, cost_model)
        out.append(Replayed(it.step, it.measured_s, t, it.tokens, float(m.tp_comm_s), float(m.cp_comm_s),
                            float(m.dp_comm_s)))
    return out


def predicted(log: RunLog, cost_model: AnalyticCostModel) -> np.ndarray:
    """Predicted seconds per iteration (no checks)."""
    return np.array([r.predicted_s for r in replay_with(log, cost_model)])
