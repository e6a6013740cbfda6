"""A policy-independent lower bound on one simulated iteration (docs/bound.md proves every term).

No valid plan of a batch, whatever policy made it, finishes an iteration of :func:`sim.simulate.simulate_plan`
(without stragglers) faster than :func:`iteration_bound`. It prices sequences with the cost model's own
``group_costs``, over every CP degree and Ulysses degree the plan validator allows, and takes the largest of:

* **work** (per stage s): the busiest rank of s is busy at least the pool's mean, and the mean is at least
  Σ over sequences of their least rank-work / W. A sequence's rank-work at degree c and Ulysses degree u is
  its own part of its group's compute, c·a(L), plus its token share of the group's fixed work c·K, at
  least L·K/M since a group of c ranks holds at most c·M tokens; K is read off two 1-token probes. Before
  its first operation the stage waits for the cheapest possible forwards of stages < s (fill); after its
  last one it needs its own gradient sync and optimizer step, or the cheapest backwards of stages < s and
  stage 0's sync (drain); interleaved with V model chunks per rank, fill and drain pass only chunk 0 of
  those stages, 1/V of their compute (their transfers whole), or chunk 0's share of its rank's layers under
  an uneven split (JobSpec.chunk_shares);
* **critical chain**: every sequence's group runs its forward through stages 0..p−1 and its backward back
  to 0, with the PP transfers between, then stage 0 syncs: the longest such chain over the sequences, each at
  its best degree and engine.

Valid for any cost model whose *compute plus TP communication* is, per group of degree c with Ulysses
degree u, a sum of non-negative per-sequence terms a(L) (depending on L, c, u, the stage only) plus a group
term K ≥ 0 that is at least an empty group's (assumption C); CP communication enters only as ≥ 0 — for the
analytic model as at least its Ulysses all-to-alls' affine floor (:func:`ulysses_floor`, assumption U) —
MoE expert-parallel communication as at least its affine floor (:func:`ep_floor`, assumption E), and PP
transfers only as non-decreasing in tokens.
Both shipped models are such (docs/bound.md); ``tests/sim/test_bound_properties.py`` checks the bound
against random valid plans and every policy.

It lives in ``sim`` because it is a statement about the simulator's semantics (1F1B dependencies, the sync
after a stage's last operation); it needs only the cost model and the batch's lengths, so it imports
``cost_models`` and nothing above it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.cost_models.base import CostModel, GroupBatch
from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.cost_models.pricing import fixed_from_probes, pricing_of
from dcpsim.cost_models.ulysses import ulysses_degrees

MEMORY_SLACK = 1e-9  # the plan validator's relative tolerance on the per-rank token budget
CHAIN_LENGTHS = 64  # distinct lengths whose chain gets its PP transfers priced (the longest compute chains)


@dataclass(frozen=True)
class Bound:
    """The bound and its terms (seconds)."""

    bound_s: float
    work_s: float  # max over stages of fill + mean rank-work + drain
    work_stage: int  # the stage attaining work_s
    chain_s: float  # the longest single-sequence chain through all stages, plus stage 0's sync
    chain_seq: int  # position (in the batch) of the sequence attaining chain_s; −1 for an empty batch
    sync_s: float  # max over stages of gradient sync + optimizer step
    memory_budget: float | None  # per-rank tokens assumed (None: no memory constraint)

    def to_dict(self) -> dict:
        return {"bound_s": self.bound_s, "work_s": self.work_s, "work_stage": self.work_stage,
                "chain_s": self.chain_s, "chain_seq": self.chain_seq, "sync_s": self.sync_s,
                "memory_budget": self.memory_budget}


class BoundCache:
    """Bounds already computed, for callers that simulate several plans of the same batches with one cost
    model (``dcpsim compare``: every policy sees the same batches). Owned and passed by the caller; keyed by
    the lengths, the cost model's repr (its frozen fields), the stage count and the budget."""

    def __init__(self) -> None:
        self._store: dict[tuple, Bound] = {}

    def get(self, lengths: np.ndarray, cost_model: CostModel, num_stages: int,
            max_tokens_per_rank: float | None) -> Bound:
        L = np.asarray(lengths, dtype=np.int64)
        key = (L.tobytes(), repr(cost_model), int(num_stages), max_tokens_per_rank)
        if key not in self._store:
            self._store[key] = iteration_bound(L, cost_model, num_stages=num_stages,
                                               max_tokens_per_rank=max_tokens_per_rank)
        return self._store[key]


def ulysses_options(job) -> list[int]:
    """Every Ulysses degree u the validator accepts in a group of some size (cost_models.ulysses: u divides the
    KV heads, and so the heads, per rank; wider than an NVLink domain included, as the validator accepts it)."""
    return list(ulysses_degrees(job, within_domain=False))


def _compute(cost_model: CostModel, stage: int, seq_len: np.ndarray, seq_group: np.ndarray, size: np.ndarray,
             u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-rank forward and backward compute + TP communication + Ulysses floor (:func:`ulysses_floor`) + EP
    floor (:func:`ep_floor`) of the groups (``size``, ``u``) holding the sequences ``seq_len`` (group
    ``seq_group`` each): compute' of docs/bound.md, the part of an operation that assumptions C, U and E cover."""
    G = len(size)
    gb = GroupBatch(seq_len=np.asarray(seq_len, dtype=np.int64), seq_group=np.asarray(seq_group, dtype=np.int64),
                    size=size.astype(np.int64), ulysses=u.astype(np.int64), first_rank=np.zeros(G, dtype=np.int64))
    c = cost_model.group_costs(gb, stage)
    tpr = gb.tokens_per_rank()
    a2a = ulysses_floor(cost_model, tpr, u)
    ep_f, ep_b = ep_floor(cost_model, tpr, stage)
    f = np.broadcast_to(np.asarray(c.fwd_compute_s + c.fwd_tp_comm_s, dtype=np.float64) + a2a + ep_f, (G,))
    b = np.broadcast_to(np.asarray(c.bwd_compute_s + c.bwd_tp_comm_s, dtype=np.float64) + a2a + ep_b, (G,))
    return f, b


def ulysses_floor(cost_model: CostModel, tpr: np.ndarray, u: np.ndarray) -> np.ndarray | float:
    """The cost model's declared lower bound on the exposed Ulysses all-to-all time per rank of one forward
    (equally one backward) of a group with Ulysses degree ``u`` holding ``tpr`` tokens per rank, affine in
    ``tpr`` (assumption U, docs/bound.md; ``Pricing.ulysses_floor``: the analytic model's four all-to-alls per
    layer, the smaller of the NVLink and the network intercept and slope). 0 for a cost model that declares
    none (CP communication then enters only as ≥ 0)."""
    return pricing_of(cost_model).ulysses_floor(tpr, u)


def ep_floor(cost_model: CostModel, tpr: np.ndarray, stage: int) -> tuple[np.ndarray | float, np.ndarray | float]:
    """The cost model's declared lower bound on the exposed MoE expert all-to-all time per rank (forward,
    backward) of a group at ``stage`` holding ``tpr`` tokens per rank, affine in ``tpr`` wherever the group's EP
    group sits (assumption E, docs/bound.md; ``Pricing.ep_floor``: the analytic model's least intercept and
    slope over the stage's EP groups, cost_models.moe.ep_comm_floor). 0 for a dense model or a cost model that
    declares none (EP communication then enters only as ≥ 0)."""
    return pricing_of(cost_model).ep_floor(tpr, stage)


def group_fixed(cost_model: CostModel, stage: int, size: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """K of assumption C per option (forward, backward): a group's compute with two 1-token sequences is
    2a(1) + K and with one a(1) + K, so K = 2·compute({1}) − compute({1, 1}) (clipped at 0 against rounding;
    C has K ≥ 0)."""
    n = len(size)
    one_f, one_b = _compute(cost_model, stage, np.ones(n), np.arange(n), size, u)
    two_f, two_b = _compute(cost_model, stage, np.ones(2 * n), np.repeat(np.arange(n), 2), size, u)
    return fixed_from_probes(one_f, two_f), fixed_from_probes(one_b, two_b)


def stage_classes(cost_model: CostModel, num_stages: int) -> list[int]:
    """Per stage, the stage whose compute + TP communication (and Ulysses floor) it shares for every group,
    so that the bound prices each class once: the cost model's ``Pricing.compute_stage_classes`` (the analytic
    model of a dense model: the stages between the ends are one class; any other: every stage its own), every
    stage its own when the bound is asked for a stage count other than the job's.
    ``tests/sim/test_bound_properties.py`` checks it."""
    p = int(num_stages)
    if p != cost_model.job.pp:
        return list(range(p))
    return list(pricing_of(cost_model).compute_stage_classes())


def _options(pool: int, us: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """All (degree c, Ulysses u) pairs with u | c ≤ pool."""
    cs, uu = [], []
    for u in us:
        c = np.arange(u, pool + 1, u)
        cs.append(c)
        uu.append(np.full(len(c), u))
    return np.concatenate(cs), np.concatenate(uu)


def iteration_bound(lengths: np.ndarray, cost_model: CostModel, *, num_stages: int | None = None,
                    max_tokens_per_rank: float | None = -1.0) -> Bound:
    """A lower bound on the iteration time of any valid plan of a batch of ``lengths``.

    ``max_tokens_per_rank``: the per-rank budget every plan honours (default: ``cost_model.max_tokens_per_rank()``;
    None: plans that ignore memory, so every degree from 1 is allowed).
    """
    job = cost_model.job
    p = int(num_stages or job.pp)
    V = int(getattr(job, "vpp", 1))  # model chunks per rank (interleaved 1F1B: docs/bound.md)
    W = int(job.pool)
    M = cost_model.max_tokens_per_rank() if max_tokens_per_rank == -1.0 else max_tokens_per_rank
    L = np.asarray(lengths, dtype=np.int64)
    uniq, inverse = np.unique(L, return_inverse=True)
    cand_c, cand_u = _options(W, ulysses_options(job))
    n_u, n_o = len(uniq), len(cand_c)
    # Every (length, option) pair: rank-work and per-rank times per stage, for the options memory allows.
    Lr = np.repeat(uniq, n_o)
    cr, ur = np.tile(cand_c, n_u), np.tile(cand_u, n_u)
    ok = np.ones(len(Lr), dtype=bool) if M is None else Lr <= cr * M * (1 + MEMORY_SLACK)
    Lr, cr, ur = Lr[ok], cr[ok], ur[ok]
    which = np.repeat(np.arange(n_u), n_o)[ok]
    if M is not None and n_u and uniq[-1] > W * M * (1 + MEMORY_SLACK):
        i = int(np.flatnonzero(L == uniq[-1])[0])
        raise InfeasibleError(f"the sequence at position {i} has {int(uniq[-1])} tokens, more than the pool of {W} "
                              f"ranks holds at {M} tokens per rank: no valid plan exists, so no bound")
    Mx = None if M is None else M * (1 + MEMORY_SLACK)
    opt_index = np.tile(np.arange(n_o), n_u)[ok]  # each (length, option) row's option
    # Price every stage class once (stage_classes: interior stages of a dense analytic model are one class).
    rep = stage_classes(cost_model, p)
    priced: dict[int, tuple] = {}
    for s in sorted(set(rep)):
        f, b = _compute(cost_model, s, Lr, np.arange(len(Lr)), cr, ur)
        kf, kb = group_fixed(cost_model, s, cand_c, cand_u)
        zf, zb = _compute(cost_model, s, np.zeros(0), np.zeros(0), cand_c, cand_u)
        priced[s] = (f, b, kf, kb, zf, zb)
    fwd, bwd, fixed_f, fixed_b, empty_f, empty_b = ([priced[rep[s]][j] for s in range(p)] for j in range(6))
    starts = np.flatnonzero(np.r_[True, which[1:] != which[:-1]]) if len(which) else np.zeros(0, dtype=np.int64)

    sync = np.array([cost_model.grad_sync_s(s) + cost_model.optimizer_s(s) for s in range(p)])
    zero_xfer = [float(np.min(cost_model.pp_transfer_s(np.zeros(1), s, np.arange(W)))) for s in range(p - 1)]
    # Cheapest per-rank forward / backward of any group at each stage (an empty group's compute).
    min_f = np.array([float(np.min(empty_f[s])) for s in range(p)])
    min_b = np.array([float(np.min(empty_b[s])) for s in range(p)])

    even = bool(getattr(job, "even_split", True)) or V == 1 or p != job.pp
    share0 = None if even else np.array([job.chunk_shares(s)[0] for s in range(p)])
    work, work_stage = 0.0, 0
    per_class: dict[int, float] = {}
    for s in range(p):
        if rep[s] not in per_class:
            K = (fixed_f[s] + fixed_b[s])[opt_index]
            # Rank-work of each sequence at each option: c·a(L) (its share of the group's per-sequence compute)
            # plus its token share of the group's fixed work c·K, at least L·K/M since a group of degree c
            # holds at most c·M tokens; without memory, c·a(L) and one group's c·K at the end.
            rw = cr * ((fwd[s] + bwd[s]) - K)
            if Mx is not None:
                rw = rw + Lr * K / Mx
            # rows are grouped by length (which is sorted), every length has one (c = W fits)
            least = np.minimum.reduceat(rw, starts) if len(L) else np.zeros(0)
            per_seq = float(least[inverse].sum()) if len(L) else 0.0
            if Mx is None and len(L):
                per_seq += float(np.min(cand_c * (fixed_f[s] + fixed_b[s])))
            per_class[rep[s]] = per_seq
        mean_busy = per_class[rep[s]] / W
        # interleaved (V chunks per rank): the fill and drain pass chunk 0 of stages < s, 1/V of their compute
        # (an uneven split: chunk 0's share; a share of the rank's compute with its ends is at most the chunk's)
        if share0 is None:
            fill_f, fill_b = min_f[:s].sum() / V, min_b[:s].sum() / V
        else:
            fill_f, fill_b = (min_f[:s] * share0[:s]).sum(), (min_b[:s] * share0[:s]).sum()
        fill = float(fill_f + sum(zero_xfer[:s]))
        drain = max(float(sync[s]), float(fill_b + sum(zero_xfer[:s]) + sync[0]))
        cand = fill + mean_busy + drain if len(L) else float(sync.max())
        if cand > work:
            work, work_stage = cand, s

    chain, chain_seq = 0.0, -1
    if len(L):
        comp = np.zeros(len(Lr))
        for r, k in zip(*np.unique(rep, return_counts=True)):
            comp += k * (fwd[r] + bwd[r])
        best = np.minimum.reduceat(comp, starts)
        if p > 1:
            # PP transfers priced per rank (each rank has its own link) for the CHAIN_LENGTHS lengths with the
            # longest compute chains: a max over fewer sequences is still a lower bound, and cheap.
            top = np.argsort(-best, kind="stable")[:CHAIN_LENGTHS]
            rows = np.flatnonzero(np.isin(which, top))
            tot = comp[rows].copy()
            for s in range(p - 1):
                xf = cost_model.pp_transfer_s((Lr[rows] / cr[rows])[:, None], s, np.arange(W)[None, :])
                tot += 2.0 * np.min(np.asarray(xf, dtype=np.float64), axis=1)  # the cheapest rank's link
            best = np.full(n_u, -np.inf)
            best[top] = np.inf
            np.minimum.at(best, which[rows], tot)
        k = int(np.argmax(best))
        chain = float(best[k] + sync[0])
        chain_seq = int(np.flatnonzero(L == uniq[k])[0])
    sync_max = float(sync.max())
    return Bound(float(max(work, chain, sync_max)), float(work), work_stage, chain, chain_seq, sync_max, M)
