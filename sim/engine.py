"""The discrete-event engine: one training iteration of a Plan on p pipeline stages, on simpy.

Semantics: docs/architecture.md, "Simulation semantics".
Every pool rank of every stage runs its microbatches in 1F1B order
(``policies.pipeline_order``: non-interleaved, or Megatron's interleaved order with ``job.vpp`` = V > 1 virtual
stages per rank), skipping microbatches it takes no part in. A CP group's forward (backward) at a (virtual)
stage is one operation of all its members: it starts when every member has finished its previous operation on
that rank *and* the microbatch's activations (gradients) have arrived from the previous (next) virtual stage,
the transfer taking ``pp_transfer_s`` after the producer ends. It lasts the group's compute, times its slowest
member's slow-down factor at that stage (the job's stragglers, cost_models.stragglers, and the ``slowdown``
argument), plus its exposed CP communication. After its last backward, each stage's pool waits for its slowest
rank (the DP wait), then runs the gradient sync and the optimizer step; the iteration ends when every stage is
done.

Interleaving (V > 1): virtual stage k = c·p + r is chunk c of rank r and holds ``job.chunk_layers(r, c)`` layers
(layers / (p·V) unless Megatron's split is uneven: cost_models.pipeline_split). It is priced as its share
of rank r's physical stage (``group_costs(groups, r)``) without the pipeline's ends, ``job.chunk_shares(r)``
(1/V for an even split, else its layers over the rank's), plus the
input embedding on virtual stage 0 and the LM head and loss on virtual stage p·V − 1 (the cost model's
``ends_s`` when it has one; a model without it has no ends), so a rank's chunks add up to its physical stage.
Transfers run between consecutive virtual stages, r → r + 1 priced by ``pp_transfer_s(·, r, ·)``; the wrap-around
p − 1 → 0 by the largest of those (the ranks' stages lie in order on the nodes, so that pair crosses a node
boundary exactly when some adjacent pair does). Fixed per-microbatch overheads are split over the chunks too,
by the same shares.

Event order: simpy's queue orders events by the key (time, priority, event id); every event here has the
normal priority, so events at the same time fire in the order they were scheduled. Operations that become
ready at the same instant therefore start in a fixed order (that of the dependencies that freed them), and
``OpTimes.order`` records it; tests pin it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import simpy

from dcpsim.cost_models.base import CostModel
from dcpsim.policies.flatten import FlatPlan
from dcpsim.policies.pipeline_order import interleaved_group_size, rank_position


class SimulationError(RuntimeError):
    """The engine could not finish an iteration (a dependency cycle: never expected for valid plans)."""


@dataclass(frozen=True)
class OpTimes:
    """Per operation (index (k·G + group)·2 + phase, phase 0 = F, 1 = B, k = c·p + stage the virtual stage of
    chunk c; k = stage at V = 1): its times in seconds."""

    num_stages: int
    compute: np.ndarray
    cp_comm: np.ndarray
    pp_wait: np.ndarray  # exposed PP transfer before the start
    start: np.ndarray
    end: np.ndarray
    order: np.ndarray  # the rank of each operation in the engine's start order
    sync_start: np.ndarray  # [p] when the stage's slowest rank is done
    sync_comm: np.ndarray  # [p] gradient reduce-scatter + parameter all-gather
    sync_end: np.ndarray  # [p] after the optimizer step
    events: int  # simpy events processed
    tp_comm: np.ndarray | None = None  # exposed TP (sequence-parallel) communication, after cp_comm; None = 0
    ep_comm: np.ndarray | None = None  # MoE expert-parallel all-to-alls, after tp_comm; None = 0
    vpp: int = 1  # virtual stages (model chunks) per rank


def _op_costs(fp: FlatPlan, cost_model: CostModel, p: int, slowdown: Mapping[int, float] | None, vpp: int = 1):
    """compute[n, G, 2], cp_comm[n, G, 2], pp transfer[n, G] (towards the next virtual stage), tp_comm[n, G, 2],
    ep_comm[n, G, 2] over the n = p·V virtual stages (the stages at V = 1)."""
    G = fp.num_groups
    compute = np.zeros((p, G, 2))
    comm = np.zeros((p, G, 2))
    tp = np.zeros((p, G, 2))
    ep = np.zeros((p, G, 2))
    xfer = np.zeros((p, G))
    tpr = fp.groups.tokens_per_rank()
    member_tpr = tpr[fp.member_group]
    member_start = np.cumsum(fp.groups.size) - fp.groups.size  # each group's members are consecutive
    for s in range(p):
        c = cost_model.group_costs(fp.groups, s)
        compute[s, :, 0], compute[s, :, 1] = c.fwd_compute_s, c.bwd_compute_s
        comm[s, :, 0], comm[s, :, 1] = c.fwd_comm_s, c.bwd_comm_s
        tp[s, :, 0], tp[s, :, 1] = c.fwd_tp_comm_s, c.bwd_tp_comm_s
        ep[s, :, 0], ep[s, :, 1] = c.fwd_ep_comm_s, c.bwd_ep_comm_s
        if s < p - 1:
            # Every member sends its own share to the same pool rank of stage s + 1; the group's next
            # operation waits for the slowest of them.
            if G:
                sent = np.broadcast_to(cost_model.pp_transfer_s(member_tpr, s, fp.member_rank), member_tpr.shape)
                xfer[s] = np.maximum.reduceat(sent, member_start)
    if vpp > 1:
        job = cost_model.job
        shares = None if job_even(cost_model) or p != job.pp else np.array([job.chunk_shares(r) for r in range(p)])
        compute, comm, tp, ep, xfer = _virtual_costs(cost_model, tpr, vpp, compute, comm, tp, ep, xfer, shares)
    job = cost_model.job
    if slowdown or job.stragglers:
        # [p, W] each slot's factor: the job's stragglers (cost_models.stragglers), and ``slowdown`` (pool rank →
        # factor at every stage) on top; a group's compute at stage s runs at its slowest member's pace there.
        factor = job.stragglers.factors(p, fp.pool, job.tp) if job.stragglers else np.ones((p, fp.pool))
        for r, f in (slowdown or {}).items():
            factor[:, int(r)] = np.maximum(factor[:, int(r)], float(f))
        g_factor = np.zeros((p, G))
        for s in range(p):
            np.maximum.at(g_factor[s], fp.member_group, factor[s, fp.member_rank])
        if vpp > 1:  # virtual stage c·p + r runs on rank r
            g_factor = np.tile(g_factor, (vpp, 1))
        compute *= g_factor[:, :, None]
    return compute, comm, xfer, tp, ep


def job_even(cost_model: CostModel) -> bool:
    """Whether the cost model's job splits its layers evenly over the virtual stages (a job without the
    attribute: yes)."""
    return bool(getattr(cost_model.job, "even_split", True))


def _virtual_costs(cost_model: CostModel, tpr: np.ndarray, vpp: int, compute: np.ndarray, comm: np.ndarray,
                   tp: np.ndarray, ep: np.ndarray, xfer: np.ndarray, shares: np.ndarray | None = None):
    """The per-stage costs [p, G, …] split into the p·V virtual stages k = c·p + r (module docstring): each is
    ``shares[r, c]`` (None: 1/V) of stage r's costs without the pipeline's ends, the embedding added on k = 0
    and the LM head on k = p·V − 1; the transfer after k is stage r's, the wrap-around r = p − 1 → 0 the
    largest of them."""
    p, G = compute.shape[0], compute.shape[1]
    ends_c, ends_t = np.zeros((p, G, 2)), np.zeros((p, G, 2))
    ends_s = getattr(cost_model, "ends_s", None)  # the analytic model's; a model without it has no ends
    if ends_s is not None and G:
        for s in (0, p - 1):
            ends_c[s, :, 0], ends_c[s, :, 1], ends_t[s, :, 0], ends_t[s, :, 1] = ends_s(tpr, s)

    def split(per_stage: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
        body = per_stage if ends is None else per_stage - ends
        if shares is None:
            out = np.tile(body / vpp, (vpp, 1, 1))
        else:  # [V·p, G, 2]: virtual stage c·p + r is shares[r, c] of rank r's body
            out = (shares.T[:, :, None, None] * body[None]).reshape(vpp * p, *body.shape[1:])
        if ends is not None:
            out[0] += ends[0]
            out[-1] += ends[-1]
        return out

    wrap = xfer[: p - 1].max(axis=0)
    xfer_v = np.tile(xfer, (vpp, 1))
    xfer_v[p - 1 :: p] = wrap
    xfer_v[-1] = 0.0
    return split(compute, ends_c), split(comm), split(tp, ends_t), split(ep), xfer_v


def _edges(fp: FlatPlan, p: int, xfer: np.ndarray, vpp: int = 1):
    """Dependency edges (src op, dst op, delay) as CSR arrays over the 2·p·V·G operations."""
    G, m = fp.num_groups, fp.num_microbatches
    src_l: list[np.ndarray] = []
    dst_l: list[np.ndarray] = []
    delay_l: list[np.ndarray] = []
    mrank, mgroup = fp.member_rank, fp.member_group
    M = len(mrank)
    ph = np.tile(np.repeat(np.array([0, 1]), M), vpp)
    chunk = np.repeat(np.arange(vpp), 2 * M)
    grp = np.tile(mgroup, 2 * vpp)
    rank = np.tile(mrank, 2 * vpp)
    for s in range(p):
        # Rank order: consecutive operations of each member at this stage (all its chunks).
        pos = rank_position(s, p, m, vpp, ph, fp.group_mb[grp], chunk)
        op = ((chunk * p + s) * G + grp) * 2 + ph
        idx = np.lexsort((pos, rank))
        same = rank[idx][1:] == rank[idx][:-1]
        src_l.append(op[idx][:-1][same])
        dst_l.append(op[idx][1:][same])
        delay_l.append(np.zeros(int(same.sum())))
    g = np.arange(G)
    for k in range(p * vpp - 1):  # activations forward, gradients backward, between virtual stages k, k + 1
        src_l += [(k * G + g) * 2, ((k + 1) * G + g) * 2 + 1]
        dst_l += [((k + 1) * G + g) * 2, (k * G + g) * 2 + 1]
        delay_l += [xfer[k], xfer[k]]
    src, dst, delay = np.concatenate(src_l), np.concatenate(dst_l), np.concatenate(delay_l)
    n_ops = 2 * p * vpp * G
    key = src * n_ops + dst
    key, first = np.unique(key, return_index=True)  # a group after a group of the same ranks: one edge
    src, dst, delay = src[first], dst[first], delay[first]
    order = np.lexsort((dst, src))
    src, dst, delay = src[order], dst[order], delay[order]
    indptr = np.searchsorted(src, np.arange(n_ops + 1))
    pending = np.bincount(dst, minlength=n_ops)
    return indptr, dst, delay, pending


def execute(fp: FlatPlan, cost_model: CostModel, num_stages: int,
            slowdown: Mapping[int, float] | None = None) -> OpTimes:
    """Run one iteration of ``fp`` on ``num_stages`` stages; return every operation's times."""
    p, G, vpp = num_stages, fp.num_groups, cost_model.job.vpp
    if vpp > 1:
        interleaved_group_size(p, fp.num_microbatches, vpp)  # the plan must suit the schedule (a PlanError)
    compute, comm, xfer, tp, ep = _op_costs(fp, cost_model, p, slowdown, vpp)
    dur = (compute + comm + tp + ep).reshape(-1).tolist()
    indptr, dst, delay, pending_arr = _edges(fp, p, xfer, vpp)
    indptr_l, dst_l, delay_l = indptr.tolist(), dst.tolist(), delay.tolist()
    pending = pending_arr.tolist()
    n_ops = 2 * p * vpp * G
    start, end, ready = [0.0] * n_ops, [0.0] * n_ops, [0.0] * n_ops
    order: list[int] = []
    env = simpy.Environment()

    def begin(op: int) -> None:
        start[op] = env.now
        order.append(op)
        # type: ignore: mypy cannot infer a lambda whose default binds the loop value
        env.timeout(dur[op]).callbacks.append(lambda _e, op=op: finish(op))  # type: ignore[misc]

    def arrive(op: int, dep_end: float) -> None:
        ready[op] = max(ready[op], dep_end)
        pending[op] -= 1
        if pending[op] == 0:
            begin(op)

    def finish(op: int) -> None:
        now = env.now
        end[op] = now
        for j in range(indptr_l[op], indptr_l[op + 1]):
            d = delay_l[j]
            if d > 0.0:
                env.timeout(d).callbacks.append(
                    lambda _e, nxt=dst_l[j], t=now: arrive(nxt, t))  # type: ignore[misc]  # as in begin()
            else:
                arrive(dst_l[j], now)

    for op in np.flatnonzero(pending_arr == 0).tolist():
        begin(op)
    env.run()
    if len(order) != n_ops:
        raise SimulationError(f"{n_ops - len(order)} of {n_ops} operations never became ready (dependency cycle)")

    start_a, end_a = np.asarray(start), np.asarray(end)
    rank_of = np.empty(n_ops, dtype=np.int64)
    rank_of[np.asarray(order)] = np.arange(n_ops)
    # Gradient sync per stage: after the slowest rank's last operation (of any chunk).
    last = end_a.reshape(vpp, p, G * 2).max(axis=(0, 2)) if G else np.zeros(p)
    sync = np.array([cost_model.grad_sync_s(s) for s in range(p)])
    opt = np.array([cost_model.optimizer_s(s) for s in range(p)])
    return OpTimes(p, compute.reshape(-1), comm.reshape(-1), start_a - np.minimum(np.asarray(ready), start_a),
                   start_a, end_a, rank_of, last, sync, last + sync + opt,
                   events=int(n_ops + np.count_nonzero(delay > 0)), tp_comm=tp.reshape(-1), ep_comm=ep.reshape(-1),
                   vpp=vpp)
