"""FlexSP-style MILP (``flexsp``): per microbatch, choose heterogeneous CP groups and assign sequences to them so
that the slowest group is as fast as possible (docs/policies/flexsp.md).

Follows Wang et al., "FlexSP: Accelerating Large Language Model Training via Flexible Sequence Parallelism"
(ASPLOS 2025): the devices of a step are partitioned into sequence-parallel groups of power-of-two sizes,
every sequence is assigned to one group, and a mixed-integer linear program minimises the maximum group time
under a linear cost model and each group's memory; sequences are first split into microbatches (their
"sequence blaster"), one MILP per microbatch, solved with a time limit.

Here, per microbatch (the sequences of a batch dealt to m microbatches by LPT on work, m as ``distca``'s
1F1B trade-off unless ``num_microbatches``), over group *slots* b: ⌊W / s⌋ slots of every power-of-two size s
and one of the whole pool (:func:`candidate_blocks`):

    minimise z  subject to   Σ_b x_ib = 1                      every sequence in one slot
                             x_ib ≤ y_b                         only in a chosen slot
                             Σ_i L_i x_ib ≤ |b| · M · y_b       memory (tokens per rank)
                             Σ_b |b| · y_b ≤ W                  the chosen groups fit the pool
                             y_(s,j+1) ≤ y_(s,j)                slots of one size are used in order
                             f_b y_b + Σ_i t_ib x_ib ≤ z        every group's time

with x, y binary, x_ib only where L_i ≤ |b| · M. The times come from the cost model at stage 0 with the
block's engine (``cp_engine``, default ``hybrid``: Ulysses inside the NVLink domain, like FlexSP's
all-to-all SP, ring across): f_b = a one-token group's forward + backward, t_ib = sequence i alone in b
minus f_b (exact for compute, which is affine in the group's sequences; the ring's exposed time is
approximated as additive).

Each sequence may use ``sizes_per_sequence`` size classes: the smallest power of two that holds it in memory
and the next doublings. The MILP runs for the ``max_milps`` microbatches whose greedy solution is slowest
(and for any the greedy cannot place); a microbatch whose program has more than ``max_milp_vars`` binary
variables keeps its greedy solution. HiGHS (scipy.optimize.milp) stops after ``node_limit`` branch-and-bound
nodes. All of these limits count work, not seconds, so the same scenario and seed give the same plan whatever
the machine's load. ``time_limit_s`` (default 600 s per MILP) is only a safety net against a pathological
program: it is never reached on the shipped scenarios (the slowest MILP there, gb200-nvl72-qwen72b-256k,
takes about 30 s on a loaded 2-core machine), and where it is reached the plan depends on the machine's speed.
A greedy solution (largest sequence first, into the option that leaves the smallest load: an open block with
memory room or a new group while the pool has ranks; if that strands a sequence, everything in one group of
the largest size) is computed first, and kept when the solver finds no better one. A microbatch the greedy
cannot place and the solver cannot solve is split in two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dcpsim.cost_models.base import CostModel, GroupBatch
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.distca import microbatch_count
from dcpsim.policies.engines import ENGINE_CHOICES, engine_for
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.opening import plan_inputs
from dcpsim.policies.plan import CPGroup, Engine, Plan, make_plan
from dcpsim.policies.registry import option, register_policy
from dcpsim.policies.wlb_llm import document_work

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch


def candidate_blocks(pool: int) -> list[tuple[int, int]]:
    """Group slots (size class, index): ⌊W / s⌋ slots of every power-of-two size s ≤ W, and one of size W.

    Any multiset of power-of-two sizes whose sum is ≤ W packs into aligned blocks of the pool (largest first,
    consecutively: every offset is then a multiple of the current size), so the MILP needs only the slots'
    sizes and Σ sizes ≤ W, not rank positions; slots of one size are interchangeable and ordered (y_j ≥ y_j+1).
    """
    out = []
    s = 1
    while s <= pool:
        out += [(s, j) for j in range(pool // s)]
        s *= 2
    if (pool, 0) not in out:
        out.append((pool, 0))
    return out


def place(sizes: list[int]) -> list[int]:
    """First ranks of groups of power-of-two ``sizes`` (or one whole-pool group), largest first, aligned."""
    order = sorted(range(len(sizes)), key=lambda k: (-sizes[k], k))
    first, at = [0] * len(sizes), 0
    for k in order:
        first[k] = at
        at += sizes[k]
    return first


@dataclass(frozen=True)
class BlockTimes:
    """Per slot: its engine and fixed time f_b; per (sequence, slot): t_ib (inf where memory forbids)."""

    blocks: list[tuple[int, int]]  # (size, index within its size class)
    engines: list[Engine]
    fixed: np.ndarray  # [B]
    seq: np.ndarray  # [n, B]


def block_times(lengths: np.ndarray, blocks: list[tuple[int, int]], kind: str, job: JobSpec,
                cost_model: CostModel, budget: int, sizes_per_sequence: int | None = None) -> BlockTimes:
    """Slot times; with ``sizes_per_sequence`` = k a sequence may only use the smallest power-of-two size that
    holds it and the next k − 1 doublings (the whole pool counts as the size class above its largest power
    of two), which keeps the MILP small."""
    n, B = len(lengths), len(blocks)
    engines = [engine_for(kind, s, job, cost_model, np.array([job.context_len])) for s, _ in blocks]
    size = np.array([s for s, _ in blocks], dtype=np.int64)
    first = np.zeros(B, dtype=np.int64)  # priced as the class's first aligned block
    u = np.array([e.ulysses for e in engines], dtype=np.int64)
    one = cost_model.group_costs(GroupBatch(np.ones(B, dtype=np.int64), np.arange(B, dtype=np.int64), size, u,
                                            first), 0)
    fixed = np.broadcast_to(np.asarray(one.total_s, dtype=np.float64), (B,)).copy()
    Lr = np.repeat(np.asarray(lengths, dtype=np.int64), B)
    gi = np.tile(np.arange(B), n)
    alone = cost_model.group_costs(GroupBatch(Lr, np.arange(n * B, dtype=np.int64), size[gi], u[gi], first[gi]), 0)
    t = np.broadcast_to(np.asarray(alone.total_s, dtype=np.float64), (n * B,)).reshape(n, B) - fixed[None, :]
    ok = Lr.reshape(n, B) <= size[None, :] * budget
    if sizes_per_sequence is not None and n:
        rank_of = np.ceil(np.log2(np.maximum(size, 1))).astype(np.int64)  # the whole pool: above its pow2
        need = -(-np.asarray(lengths, dtype=np.int64) // budget)
        first = np.ceil(np.log2(np.maximum(need, 1))).astype(np.int64)
        ok &= rank_of[None, :] < first[:, None] + sizes_per_sequence
    t = np.where(ok, np.maximum(t, 0.0), np.inf)
    return BlockTimes(blocks, engines, fixed, t)


def greedy(bt: BlockTimes, lengths: np.ndarray, budget: int, pool: int) -> tuple[float, list[int]] | None:
    """Slot index per sequence, largest first into the option with the smallest resulting load (an open slot
    with memory room, or a new slot while Σ sizes ≤ W); when a sequence finds no slot, everything in the
    largest slot; None when even that lacks memory."""
    n, B = bt.seq.shape
    size = np.array([s for s, _ in bt.blocks])
    is_open = np.zeros(B, dtype=bool)
    load = bt.fixed.copy()
    tokens = np.zeros(B)
    out = [-1] * n
    best_alone = np.min(bt.seq, axis=1)
    for i in np.lexsort((np.arange(n), -best_alone)).tolist():
        used = int(size[is_open].sum())
        ok = np.isfinite(bt.seq[i]) & (tokens + lengths[i] <= size * budget)
        cand = ok & (is_open | (used + size <= pool))
        if not cand.any():
            return _one_group(bt, lengths, budget)
        after = np.where(cand, load + bt.seq[i], np.inf)
        b = int(np.argmin(after))
        is_open[b] = True
        load[b] += bt.seq[i, b]
        tokens[b] += lengths[i]
        out[i] = b
    return float(np.max(np.where(is_open, load, 0.0))), out


def _one_group(bt: BlockTimes, lengths: np.ndarray, budget: int) -> tuple[float, list[int]] | None:
    """Every sequence in the largest slot (the whole pool, or its largest power of two), if memory allows."""
    b = int(np.argmax([s for s, _ in bt.blocks]))
    size = bt.blocks[b][0]
    if float(np.sum(lengths)) > size * budget or not np.all(np.isfinite(bt.seq[:, b])):
        return None
    return float(bt.fixed[b] + bt.seq[:, b].sum()), [b] * len(lengths)


def solve_milp(bt: BlockTimes, lengths: np.ndarray, budget: int, pool: int, node_limit: int,
               time_limit_s: float) -> tuple[float, list[int]] | None:
    """The MILP of the module docstring; None when HiGHS finds no feasible solution within its limits."""
    # scipy loads here, not at import: 'dcpsim policies' imports every policy module to list it
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    n, B = bt.seq.shape
    ii, bb = np.nonzero(np.isfinite(bt.seq))
    P = len(ii)
    nx, ny = P, B
    zc = nx + ny  # the index of z
    nv = zc + 1
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def add(rr, cc, vv, lower, upper):
        nonlocal r
        rows.append(np.asarray(rr) + r)
        cols.append(np.asarray(cc))
        vals.append(np.asarray(vv, dtype=np.float64))
        k = int(np.max(rr)) + 1 if len(rr) else 0
        lo.extend([lower] * k)
        hi.extend([upper] * k)
        r += k

    p = np.arange(P)
    add(ii, p, np.ones(P), 1.0, 1.0)  # each sequence once
    add(np.r_[p, p], np.r_[p, nx + bb], np.r_[np.ones(P), -np.ones(P)], -np.inf, 0.0)  # x ≤ y
    size = np.array([s for s, _ in bt.blocks], dtype=np.float64)
    # (rows scaled to O(1) coefficients: tokens in units of M, times in units of the largest finite t_ib)
    add(np.r_[bb, np.arange(B)], np.r_[p, nx + np.arange(B)], np.r_[lengths[ii] / budget, -size], -np.inf, 0.0)
    add(np.zeros(B, dtype=np.int64), nx + np.arange(B), size, -np.inf, float(pool))  # Σ sizes ≤ W
    nxt = [j for j in range(B - 1) if bt.blocks[j + 1] == (bt.blocks[j][0], bt.blocks[j][1] + 1)]
    if nxt:  # symmetry: slot j+1 of a size class only after slot j
        k = np.arange(len(nxt))
        add(np.r_[k, k], nx + np.r_[np.asarray(nxt), np.asarray(nxt) + 1],
            np.r_[-np.ones(len(nxt)), np.ones(len(nxt))], -np.inf, 0.0)
    unit = float(np.max(bt.seq[ii, bb])) if P else 1.0
    unit = unit if unit > 0 else 1.0
    add(np.r_[bb, np.arange(B), np.arange(B)], np.r_[p, nx + np.arange(B), np.full(B, zc)],
        np.r_[bt.seq[ii, bb] / unit, bt.fixed / unit, -np.ones(B)], -np.inf, 0.0)  # block time ≤ z
    A = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nv)).tocsr()
    c = np.zeros(nv)
    c[zc] = 1.0
    integrality = np.r_[np.ones(nx + ny), 0.0]
    res = milp(c, constraints=LinearConstraint(A, np.asarray(lo), np.asarray(hi)), integrality=integrality,
               bounds=Bounds(np.zeros(nv), np.r_[np.ones(nx + ny), np.inf]),
               options={"node_limit": int(node_limit), "time_limit": float(time_limit_s), "mip_rel_gap": 1e-2,
                        "presolve": True})
    if res.x is None:
        return None
    x = res.x[:nx] > 0.5
    out = [-1] * n
    for k in np.flatnonzero(x).tolist():
        out[int(ii[k])] = int(bb[k])
    if min(out) < 0:
        return None
    return float(res.x[zc]) * unit, out


@register_policy("flexsp")
@dataclass(frozen=True)
class FlexSP:
    """FlexSP-style min-max MILP over sequence-to-group assignment, per microbatch (HiGHS)."""

    num_microbatches: int | None = option(None, ge=1)
    node_limit: int = option(20, ge=1)
    time_limit_s: float = option(600.0, gt=0.0)  # a safety net only (module docstring)
    max_milp_vars: int = option(4000, ge=1)
    max_milps: int = option(8, ge=0)
    sizes_per_sequence: int = option(3, ge=1)
    cp_engine: str = option("hybrid", choices=ENGINE_CHOICES)
    name: ClassVar[str]  # set by @register_policy

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan:
        inp = plan_inputs(self.name, batch, cost_model)
        W, M, ids, L = job.pool, inp.budget, inp.ids, inp.lengths
        blocks = candidate_blocks(W)
        biggest = max(s for s, _ in blocks)
        inp.check_fit(biggest * M,
                      f"more than the largest group ({biggest} ranks) holds at {M} tokens per rank")
        m = microbatch_count(self.num_microbatches, L, cost_model, job.pp)
        bt_all = block_times(L, blocks, self.cp_engine, job, cost_model, M, self.sizes_per_sequence)
        # LPT on work into m microbatches, each within the pool's tokens.
        work = document_work(L, job)
        load, room = np.zeros(m), np.full(m, float(W * M))
        members: list[list[int]] = [[] for _ in range(m)]
        for i in np.lexsort((np.arange(len(L)), -work)).tolist():
            ok = room >= L[i]
            k = int(np.argmin(np.where(ok, load, np.inf))) if ok.any() else int(np.argmin(load))
            members[k].append(i)
            load[k] += work[i]
            room[k] -= L[i]
        queue = [sorted(mb) for mb in members if mb]

        def restrict(idx: np.ndarray) -> BlockTimes:
            keep = [b for b, (_, j) in enumerate(blocks) if j < len(idx)]  # never more groups than sequences
            return BlockTimes([blocks[b] for b in keep], [bt_all.engines[b] for b in keep], bt_all.fixed[keep],
                              bt_all.seq[np.ix_(idx, np.asarray(keep, dtype=np.int64))])

        # The MILP runs for the max_milps microbatches whose greedy solution is slowest (they set the pace).
        first = [greedy(restrict(np.asarray(q)), L[q], M, W) for q in queue]
        slowest = sorted((-(g[0] if g else math.inf), k) for k, g in enumerate(first))[:self.max_milps]
        chosen = {tuple(queue[k]) for _, k in slowest}
        mbs, solved, fell_back = [], 0, 0
        while queue:
            idx = np.asarray(queue.pop(0), dtype=np.int64)
            sub = restrict(idx)
            g = greedy(sub, L[idx], M, W)
            small = int(np.isfinite(sub.seq).sum()) + len(sub.blocks) <= self.max_milp_vars
            s = (solve_milp(sub, L[idx].astype(np.float64), M, W, self.node_limit, self.time_limit_s)
                 if small and (g is None or tuple(idx.tolist()) in chosen) else None)
            if s is not None and (g is None or s[0] < g[0] * (1 - 1e-9)):
                best, solved = s, solved + 1
            elif g is not None:
                best, fell_back = g, fell_back + 1
            else:
                if len(idx) == 1:
                    raise PolicyError(f"flexsp: sequence id {int(ids[idx[0]])} fits no group")  # unreachable
                half = len(idx) // 2
                queue[:0] = [idx[:half].tolist(), idx[half:].tolist()]
                continue
            assign = best[1]
            used = sorted(set(assign))
            firsts = place([sub.blocks[b][0] for b in used])
            groups = []
            for b, f in zip(used, firsts):
                size = sub.blocks[b][0]
                groups.append(CPGroup(tuple(range(f, f + size)),
                                      tuple(int(ids[idx[j]]) for j in range(len(idx)) if assign[j] == b),
                                      sub.engines[b]))
            mbs.append(sorted(groups, key=lambda g: g.ranks[0]))
        return make_plan(self.name, W, mbs, max_tokens_per_rank=M, milp_solved=solved, greedy_kept=fell_back)
