"""1F1B orders: the order in which a pipeline rank runs the forwards and backwards of m microbatches.

**Non-interleaved** (V = 1). Stage ``s`` of ``p`` runs ``w = min(p − s − 1, m)`` warm-up forwards F(0) …
F(w − 1), then the steady state alternates F(w + i), B(i) for i = 0 … m − w − 1, then the cool-down runs the
remaining backwards B(m − w) … B(m − 1) (Narayanan et al., "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", SC'21, §2.2; Megatron-Core's ``forward_backward_pipelining_without_interleaving``).

**Interleaved** (V > 1 virtual stages, "model chunks", per rank; Megatron-Core's
``forward_backward_pipelining_with_interleaving``). Virtual stage k = c·p + r is chunk c of rank r, so a
microbatch's forward visits rank 0 … p − 1 V times over. Each rank walks Megatron's *schedule table*
(``get_schedule_table``): the microbatches in groups of N (``microbatch_group_size_per_vp_stage``, Megatron's
default N = p), and inside a group every microbatch of chunk 0, then of chunk 1, …; the last group holds the
remaining m − ⌊·⌋ microbatches. Table entry k is the k-th forward; the k-th backward is the same microbatch
on chunk V − 1 − c. A rank runs ``w = min(2·(p − r − 1) + (V − 1)·N, m·V)`` warm-up forwards
(``get_pp_rank_microbatches``), then alternates forward w + i, backward i, then the remaining backwards — the
1F1B pattern over the table's m·V entries. Megatron accepts N only in [p, m] with m mod N = 0 or ≥ p (else it
raises); :func:`interleaved_group_size` picks N = p when p divides m (its default) and otherwise the smallest N
it accepts for that m, and a plan of fewer than p microbatches is a PlanError.

This is the one definition of these orders in the project: the simulator (``sim.engine``, ``sim.simulate``)
runs them, and HyDra's ordering model (``policies.hydra.order``) scores candidate microbatch orders with the
non-interleaved one. ``phase`` is 0 for a forward and 1 for a backward throughout.
"""

from __future__ import annotations

import numpy as np

from dcpsim.policies.errors import PlanError

__all__ = ["interleaved_group_size", "interleaved_num_warmup", "interleaved_position", "num_warmup",
           "one_f_one_b_position", "rank_order", "rank_position", "schedule_table", "stage_order"]


def num_warmup(stage: int, num_stages: int, m: int) -> int:
    """Forwards that stage ``stage`` runs before its first backward: min(p − s − 1, m)."""
    return min(num_stages - stage - 1, m)


def _position(w: int, total: int, phase: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Position of the k-th forward (phase 0) or k-th backward (phase 1) in a 1F1B order of ``total`` forwards
    with ``w`` warm-up forwards: F(k) at k for k < w and at 2k − w after; B(k) at w + 2k + 1 in the steady state
    (k < total − w) and at total + k in the cool-down."""
    fwd = np.where(k < w, k, 2 * k - w)
    bwd = np.where(k < total - w, w + 2 * k + 1, total + k)
    return np.where(np.asarray(phase) == 0, fwd, bwd)


def one_f_one_b_position(stage: int, num_stages: int, m: int, phase: np.ndarray,
                         mb: np.ndarray) -> np.ndarray:
    """Position (0 … 2m − 1) of each (phase, microbatch) in stage ``stage``'s 1F1B order, vectorised.

    With w warm-up forwards: F(k) sits at k for k < w and at 2k − w after; B(k) sits at w + 2k + 1 in the
    steady state (k < m − w) and at m + k in the cool-down.
    """
    return _position(num_warmup(stage, num_stages, m), m, phase, np.asarray(mb, dtype=np.int64))


def stage_order(stage: int, num_stages: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(phase, microbatch) arrays of the 2m operations of stage ``stage``, in 1F1B order: the inverse of
    :func:`one_f_one_b_position`."""
    phase = np.repeat(np.array([0, 1], dtype=np.int64), m)
    mb = np.tile(np.arange(m, dtype=np.int64), 2)
    order = np.empty(2 * m, dtype=np.int64)
    order[one_f_one_b_position(stage, num_stages, m, phase, mb)] = np.arange(2 * m)
    return phase[order], mb[order]


def interleaved_group_size(num_stages: int, m: int, vpp: int) -> int:
    """Megatron's ``microbatch_group_size_per_vp_stage`` N for m microbatches on p ranks: p when p divides m
    (Megatron's default), else the smallest N in [p, m] with m mod N = 0 or m mod N ≥ p (the values Megatron
    accepts; N = m always is one). A PlanError when m < p (Megatron: N must lie in [p, m])."""
    p = num_stages
    if p < 2:
        raise PlanError(f"job.vpp = {vpp} is invalid with {p} pipeline stage(s): interleaved 1F1B needs pp ≥ 2")
    if m < p:
        raise PlanError(f"plan.num_microbatches = {m} is invalid with job.vpp = {vpp}: Megatron's interleaved "
                        f"1F1B needs at least pp = {p} microbatches")
    return next(n for n in range(p, m + 1) if m % n == 0 or m % n >= p)


def interleaved_num_warmup(rank: int, num_stages: int, m: int, vpp: int, group: int) -> int:
    """Forwards (table entries) rank ``rank`` runs before its first backward: min(2(p − r − 1) + (V − 1)·N, m·V)."""
    return min(2 * (num_stages - rank - 1) + (vpp - 1) * group, m * vpp)


def schedule_table(m: int, vpp: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Megatron's schedule table: (microbatch, chunk) of forward k = 0 … m·V − 1."""
    mbs: list[int] = []
    chunks: list[int] = []
    for first in range(0, m, group):
        last = min(m, first + group)
        for c in range(vpp):
            mbs += range(first, last)
            chunks += [c] * (last - first)
    return np.asarray(mbs, dtype=np.int64), np.asarray(chunks, dtype=np.int64)


def _table_index(mb: np.ndarray, chunk: np.ndarray, m: int, vpp: int, group: int) -> np.ndarray:
    """Index in :func:`schedule_table` of (microbatch, chunk): the groups before it hold N·V entries each, its
    own group N per chunk, or m − first when it is the last."""
    first = (mb // group) * group
    size = np.where(first + group >= m, m - first, group)
    return first * vpp + chunk * size + (mb - first)


def interleaved_position(rank: int, num_stages: int, m: int, vpp: int, phase: np.ndarray, mb: np.ndarray,
                         chunk: np.ndarray) -> np.ndarray:
    """Position (0 … 2·m·V − 1) of each (phase, microbatch, chunk) in rank ``rank``'s interleaved order."""
    n = interleaved_group_size(num_stages, m, vpp)
    w = interleaved_num_warmup(rank, num_stages, m, vpp, n)
    mb = np.asarray(mb, dtype=np.int64)
    chunk = np.asarray(chunk, dtype=np.int64)
    # The k-th backward runs table entry k's microbatch on chunk V − 1 − c.
    table_chunk = np.where(np.asarray(phase) == 0, chunk, vpp - 1 - chunk)
    return _position(w, m * vpp, phase, _table_index(mb, table_chunk, m, vpp, n))


def rank_position(rank: int, num_stages: int, m: int, vpp: int, phase: np.ndarray, mb: np.ndarray,
                  chunk: np.ndarray) -> np.ndarray:
    """Position of each (phase, microbatch, chunk) in rank ``rank``'s order: :func:`one_f_one_b_position` at
    V = 1 (chunk 0 only), :func:`interleaved_position` above."""
    if vpp == 1:
        return one_f_one_b_position(rank, num_stages, m, phase, mb)
    return interleaved_position(rank, num_stages, m, vpp, phase, mb, chunk)


def rank_order(rank: int, num_stages: int, m: int, vpp: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(phase, microbatch, chunk) arrays of the 2·m·V operations of rank ``rank`` in order: the inverse of
    :func:`rank_position`."""
    phase = np.repeat(np.array([0, 1], dtype=np.int64), m * vpp)
    mb = np.tile(np.arange(m, dtype=np.int64), 2 * vpp)
    chunk = np.tile(np.repeat(np.arange(vpp, dtype=np.int64), m), 2)
    order = np.empty(2 * m * vpp, dtype=np.int64)
    order[rank_position(rank, num_stages, m, vpp, phase, mb, chunk)] = np.arange(2 * m * vpp)
    return phase[order], mb[order], chunk[order]
