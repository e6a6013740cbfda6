"""HyDra's column balancing (the end of step 5): mirror aligned blocks of ranks so that every rank's total load
evens out.

Once the microbatches' order is fixed (:mod:`policies.hydra.order`), each microbatch's groups can sit on any
aligned blocks of the pool without changing its groups: microbatch by microbatch and top-down over the binary
tree of aligned blocks, the two halves of a block swap places when that puts this microbatch's heavier half on
the columns that have carried less so far (with stragglers: when that lowers the larger of the halves'
projected times). docs/hydra.md §7.
"""

from __future__ import annotations

import numpy as np


def balance_columns(loads: np.ndarray, slow: np.ndarray | None = None) -> np.ndarray:
    """Mirror aligned blocks so that every rank ends the iteration with a similar total load.

    ``loads`` [m, W] is each rank's load per microbatch in run order, W a power of two and every group an
    aligned block. Microbatch by microbatch, top-down over the binary tree of aligned blocks, the two halves
    of a block swap places when that puts the half with more load of this microbatch on the half of the
    columns that has carried less so far. A group never straddles a swapped boundary (it is aligned and
    smaller than the block, or it contains the block), so every group stays an aligned block of the same
    ranks' size. Returns ``pos`` [m, W]: the new rank of each old rank. O(m · W · log W), vectorised per level.
    With ``slow`` ([W] slow-down factors ≥ 1, stragglers) the halves compare time, not load: a column's load
    takes f times as long, and the halves swap when that lowers the larger of their projected times.
    """
    m, W = loads.shape
    pos = np.tile(np.arange(W), (m, 1))
    if W & (W - 1) or W == 1:
        return pos
    total = np.zeros(W)
    for k in range(m):
        idx = np.arange(W)  # idx[new position] = old rank
        s = W // 2
        while s >= 1:
            blocks = idx.reshape(-1, 2, s)
            have = loads[k][blocks].sum(axis=2)
            if slow is None:
                carried = total.reshape(-1, 2, s).sum(axis=2)
                flip = ((have[:, 0] - have[:, 1]) * (carried[:, 0] - carried[:, 1])) > 0
            else:  # per half: time carried, and the mean factor a load placed there runs at
                carried = (total * slow).reshape(-1, 2, s).sum(axis=2)
                f = slow.reshape(-1, 2, s).mean(axis=2)
                stay = np.maximum(carried[:, 0] + have[:, 0] * f[:, 0], carried[:, 1] + have[:, 1] * f[:, 1])
                swap = np.maximum(carried[:, 0] + have[:, 1] * f[:, 0], carried[:, 1] + have[:, 0] * f[:, 1])
                flip = swap < stay
            blocks[flip] = blocks[flip][:, ::-1, :]
            idx = blocks.reshape(-1)
            s //= 2
        pos[k, idx] = np.arange(W)
        total += loads[k][idx]
    return pos
