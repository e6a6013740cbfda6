"""Non-interleaved 1F1B: the order in which a pipeline stage runs the forward and backward of m microbatches.

Stage ``s`` of ``p`` runs ``w = min(p − s − 1, m)`` warm-up forwards F(0) … F(w − 1), then the steady state
alternates F(w + i), B(i) for i = 0 … m − w − 1, then the cool-down runs the remaining backwards
B(m − w) … B(m − 1) (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21, §2.2; Megatron-Core's ``forward_backward_pipelining_without_interleaving``).

This is the one definition of that order in the project: the simulator (``sim.engine``, ``sim.simulate``)
runs it, and HyDra's ordering model (``policies.hydra_order``) scores candidate microbatch orders with it.
``phase`` is 0 for a forward and 1 for a backward throughout.
"""

from __future__ import annotations

import numpy as np

__all__ = ["num_warmup", "one_f_one_b_position", "stage_order"]


def num_warmup(stage: int, num_stages: int, m: int) -> int:
    """Forwards that stage ``stage`` runs before its first backward: min(p − s − 1, m)."""
    return min(num_stages - stage - 1, m)


def one_f_one_b_position(stage: int, num_stages: int, m: int, phase: np.ndarray,
                         mb: np.ndarray) -> np.ndarray:
    """Position (0 … 2m − 1) of each (phase, microbatch) in stage ``stage``'s 1F1B order, vectorised.

    With w warm-up forwards: F(k) sits at k for k < w and at 2k − w after; B(k) sits at w + 2k + 1 in the
    steady state (k < m − w) and at m + k in the cool-down.
    """
    w = num_warmup(stage, num_stages, m)
    mb = np.asarray(mb, dtype=np.int64)
    fwd = np.where(mb < w, mb, 2 * mb - w)
    bwd = np.where(mb < m - w, w + 2 * mb + 1, m + mb)
    return np.where(np.asarray(phase) == 0, fwd, bwd)


def stage_order(stage: int, num_stages: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(phase, microbatch) arrays of the 2m operations of stage ``stage``, in 1F1B order: the inverse of
    :func:`one_f_one_b_position`."""
    phase = np.repeat(np.array([0, 1], dtype=np.int64), m)
    mb = np.tile(np.arange(m, dtype=np.int64), 2)
    order = np.empty(2 * m, dtype=np.int64)
    order[one_f_one_b_position(stage, num_stages, m, phase, mb)] = np.arange(2 * m)
    return phase[order], mb[order]
