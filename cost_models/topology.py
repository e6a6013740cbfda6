"""Where ranks live: Megatron's rank order is TP fastest, then the DP×CP pool, then PP, so pool rank ``w``
of stage ``s`` occupies GPUs (s·W + w)·t .. (s·W + w + 1)·t − 1 and sits on node ⌊(s·W + w)·t / G⌋ for G GPUs
per node. With t = 8 every CP group crosses nodes; with t = 1 an aligned group of ≤ 8 ranks stays inside one.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.specs import JobSpec


def node_of(job: JobSpec, stage: int, rank: np.ndarray | int) -> np.ndarray:
    """Node index of pool rank(s) ``rank`` at ``stage`` (a TP group never straddles a node: t ≤ G)."""
    return (stage * job.pool + np.asarray(rank, dtype=np.int64)) * job.tp // job.gpu.gpus_per_node


def spans_nodes(job: JobSpec, stage: int, first: np.ndarray | int, size: np.ndarray | int) -> np.ndarray:
    """Whether the contiguous ranks first .. first+size−1 occupy more than one node."""
    first = np.asarray(first, dtype=np.int64)
    last = first + np.asarray(size, dtype=np.int64) - 1
    return node_of(job, stage, first) != node_of(job, stage, last)


def link_name(crosses: np.ndarray | bool) -> np.ndarray:
    """'network' where a transfer crosses nodes, else 'nvlink'."""
    return np.where(np.asarray(crosses), "network", "nvlink")
