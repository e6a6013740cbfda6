"""Simulate one iteration of a Plan: flatten → engine → Timeline → Metrics. A pure function of its inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.policies.flatten import FlatPlan, flatten
from dcpsim.policies.pipeline_order import rank_position
from dcpsim.policies.plan import Plan
from dcpsim.sim.bound import MEMORY_SLACK, Bound, BoundCache, iteration_bound
from dcpsim.sim.engine import OpTimes, execute
from dcpsim.sim.metrics import Metrics, compute_metrics
from dcpsim.sim.timeline import Timeline

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

GIB = float(1 << 30)


@dataclass(frozen=True)
class IterationResult:
    plan: Plan
    timeline: Timeline
    metrics: Metrics
    events: int


def _member_ops(fp: FlatPlan, p: int, vpp: int = 1):
    """Per (virtual stage, phase, member) rows: (physical) stage, rank, group, phase, op index."""
    G, M, n = fp.num_groups, len(fp.member_rank), p * vpp
    vstage = np.repeat(np.arange(n), 2 * M)
    phase = np.tile(np.repeat(np.array([0, 1]), M), n)
    group = np.tile(fp.member_group, 2 * n)
    rank = np.tile(fp.member_rank, 2 * n)
    op = (vstage * G + group) * 2 + phase
    return vstage % p, rank, group, phase, op


def build_timeline(fp: FlatPlan, ot: OpTimes) -> Timeline:
    """The Timeline of an iteration; with V > 1 a row's ``stage`` is the physical stage (rank) that ran it."""
    p, W = ot.num_stages, fp.pool
    stage, rank, group, phase, op = _member_ops(fp, p, ot.vpp)
    mb = fp.group_mb[group]
    tpr = fp.groups.tokens_per_rank()[group]
    ph = np.where(phase == 0, "F", "B")
    st, comp, cpc, ppw = ot.start[op], ot.compute[op], ot.cp_comm[op], ot.pp_wait[op]
    parts = []

    def add(mask, stg, rk, m, phs, kind, comm, s, e, tok):
        parts.append({"stage": stg[mask], "rank": rk[mask], "microbatch": m[mask], "phase": phs[mask],
                      "kind": np.full(int(mask.sum()), kind), "comm": np.full(int(mask.sum()), comm),
                      "start": s[mask], "end": e[mask], "tokens": tok[mask]})

    every = np.ones(len(op), dtype=bool)
    add(ppw > 0, stage, rank, mb, ph, "comm", "pp", st - ppw, st, tpr)
    add(every, stage, rank, mb, ph, "compute", "", st, st + comp, tpr)
    add(cpc > 0, stage, rank, mb, ph, "comm", "cp", st + comp, st + comp + cpc, tpr)
    tpc = ot.tp_comm[op] if ot.tp_comm is not None else np.zeros(len(op))
    add(tpc > 0, stage, rank, mb, ph, "comm", "tp", st + comp + cpc, st + comp + cpc + tpc, tpr)
    if ot.ep_comm is not None:
        epc = ot.ep_comm[op]
        e0 = st + comp + cpc + tpc
        add(epc > 0, stage, rank, mb, ph, "comm", "ep", e0, e0 + epc, tpr)

    # Per (stage, rank): DP wait, gradient sync, optimizer step.
    last = np.zeros(p * W)
    np.maximum.at(last, stage * W + rank, ot.end[op])
    s_stage = np.repeat(np.arange(p), W)
    s_rank = np.tile(np.arange(W), p)
    s0, sc, se = ot.sync_start[s_stage], ot.sync_comm[s_stage], ot.sync_end[s_stage]
    neg, zero, sph = np.full(p * W, -1), np.zeros(p * W), np.full(p * W, "S")
    add(s0 > last, s_stage, s_rank, neg, sph, "idle", "", last, s0, zero)
    add(sc > 0, s_stage, s_rank, neg, sph, "comm", "dp", s0, s0 + sc, zero)
    add(se > s0 + sc, s_stage, s_rank, neg, sph, "compute", "", s0 + sc, se, zero)
    cols = {k: np.concatenate([d[k] for d in parts]) for k in parts[0]}
    for k in ("stage", "rank", "microbatch"):
        cols[k] = cols[k].astype(np.int32)
    return Timeline(cols, p, W)


def largest_microbatch_tokens(fp: FlatPlan) -> tuple[np.ndarray, np.ndarray]:
    """[W] each rank's largest tokens in one microbatch, and in one microbatch whose group has CP degree > 1
    (0 if none): what its transient buffers are sized by (cost_models.memory)."""
    largest, cp = np.zeros(fp.pool), np.zeros(fp.pool)
    if fp.num_groups:
        tpr = fp.groups.tokens_per_rank()[fp.member_group]
        np.maximum.at(largest, fp.member_rank, tpr)
        np.maximum.at(cp, fp.member_rank, np.where(fp.groups.size[fp.member_group] > 1, tpr, 0.0))
    return largest, cp


def peak_tokens_in_flight(fp: FlatPlan, p: int, vpp: int = 1, shares: np.ndarray | None = None) -> np.ndarray:
    """[p, W] largest sum of tokens of microbatches whose activations a rank holds at once, in its 1F1B order
    (policies.pipeline_order), in whole-stage equivalents. With V > 1 a chunk's forward holds its share of the
    stage's layers, ``shares[s, c]`` (None: 1/V, an even split; JobSpec.chunk_shares), so it counts tokens times
    that share: the interleaved warm-up's 2(p − r − 1) + (V − 1)·N chunk forwards weigh what they hold."""
    W, m = fp.pool, fp.num_microbatches
    out = np.zeros((p, W))
    if fp.num_groups == 0:
        return out
    tok = fp.groups.tokens_per_rank()[fp.member_group]
    tpr = tok / vpp if vpp > 1 else tok
    mb = np.tile(fp.group_mb[fp.member_group], 2 * vpp)
    phase = np.tile(np.repeat(np.array([0, 1]), len(tpr)), vpp)
    chunk = np.repeat(np.arange(vpp), 2 * len(tpr))
    for s in range(p):
        pos = rank_position(s, p, m, vpp, phase, mb, chunk)
        rank = np.tile(fp.member_rank, 2 * vpp)
        if shares is None or vpp == 1:
            delta = np.tile(np.concatenate([tpr, -tpr]), vpp)
        else:
            delta = np.concatenate([np.concatenate([tok * a, -tok * a]) for a in shares[s]])
        idx = np.lexsort((pos, rank))
        rank, delta = rank[idx], delta[idx]
        csum = np.cumsum(delta)
        starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
        base = np.r_[0.0, csum][starts]
        seg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(rank)]))
        peak = np.full(len(starts), -np.inf)
        np.maximum.at(peak, seg, csum - base[seg])
        out[s, rank[starts]] = peak
    return out


def simulate_plan(plan: Plan, batch: GlobalBatch, cost_model: CostModel, *, num_stages: int | None = None,
                  slowdown: Mapping[int, float] | None = None, scheduling_time_s: float = 0.0,
                  bound_cache: BoundCache | None = None) -> IterationResult:
    """Simulate one iteration of ``plan`` over ``batch`` with ``cost_model``.

    ``slowdown`` maps pool ranks to compute slow-down factors (stragglers); a CP group runs at its slowest
    member's pace. ``num_stages`` defaults to the job's PP degree.
    """
    job = cost_model.job
    p = num_stages or job.pp
    fp = flatten(plan, batch)
    ot = execute(fp, cost_model, p, slowdown)
    tl = build_timeline(fp, ot)
    shares = None if job.even_split or p != job.pp else np.array([job.chunk_shares(s) for s in range(p)])
    peak_tok = peak_tokens_in_flight(fp, p, job.vpp, shares)
    largest, cp_largest = largest_microbatch_tokens(fp)
    peak_gb = max(float(np.max(cost_model.peak_memory_gb(peak_tok[s], s, largest, cp_largest))) for s in range(p))
    lengths = np.asarray(batch.lengths)
    metrics = compute_metrics(
        tl, tokens=int(lengths.sum()), model_flops=cost_model.model_flops(lengths), num_gpus=job.num_gpus,
        peak_tflops=job.gpu.peak_bf16_tflops, peak_memory_gib=peak_gb * 1e9 / GIB,
        num_microbatches=plan.num_microbatches, scheduling_time_s=scheduling_time_s,
        bound_s=plan_bound(fp, lengths, cost_model, p, bound_cache).bound_s)
    return IterationResult(plan, tl, metrics, ot.events)


def plan_bound(fp: FlatPlan, lengths: np.ndarray, cost_model: CostModel, num_stages: int,
               cache: BoundCache | None = None) -> Bound:
    """The lower bound (sim.bound) that applies to this plan: under the cost model's memory budget when the
    plan honours it (checked here, not taken from the plan's metadata), else without a memory constraint."""
    budget = cost_model.max_tokens_per_rank()
    per_rank = np.zeros((max(fp.num_microbatches, 1), fp.pool))
    tpr = fp.groups.tokens_per_rank()
    np.add.at(per_rank, (fp.group_mb[fp.member_group], fp.member_rank), tpr[fp.member_group])
    honours = float(per_rank.max(initial=0.0)) <= budget * (1 + MEMORY_SLACK)
    limit = budget if honours else None
    if cache is not None:
        return cache.get(lengths, cost_model, num_stages, limit)
    return iteration_bound(lengths, cost_model, num_stages=num_stages, max_tokens_per_rank=limit)
