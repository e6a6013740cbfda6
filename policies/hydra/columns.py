"""HyDra's column balancing: mirror aligned blocks of ranks so that every rank's total load evens out.

Once the microbatches' order is fixed (:mod:`policies.hydra_order`), each microbatch's groups can sit on any
aligned blocks of the pool without changing its groups: microbatch by microbatch and top-down over the binary
tree of aligned blocks, the two halves of a block swap places when that puts this microbatch's heavier half on
the columns that have carried less so far (with stragglers: when that lowers the larger of the halves'
projected times). docs/hydra.md §7.
"""

from __future__ import annotations

import numpy as np


def _block_sums(x: np.ndarray, W: int) -> np.ndarray:
    """The sums of ``x``'s aligned blocks of s columns along the last axis for s = W/2, W/4, …, 1, side by
    side (2W − 2 columns): each numpy's sum over the block's columns in their order, the same numbers as the
    mirroring loop of the first version took."""
    parts = []
    s = W // 2
    while s >= 1:
        parts.append(x.reshape(*x.shape[:-1], W // s, s).sum(axis=-1))
        s //= 2
    return np.concatenate(parts, axis=-1)


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

    A swap moves whole halves, so when level s is decided each slot of s columns holds one aligned block of
    s old ranks in their own order: the load of a half is that block's sum, computed for every microbatch and
    level up front. A node (an aligned block of 2s old ranks) swaps its halves when its own difference (first
    half − second) times the difference of what the two slots it sits on carried is positive.
    """
    m, W = loads.shape
    pos = np.tile(np.arange(W), (m, 1))
    if W & (W - 1) or W == 1:
        return pos
    if slow is not None:
        return _balance_slow(loads, slow, pos)
    L = W.bit_length() - 1  # levels; level l has 2^l nodes, heap-numbered 2^l − 1 + a
    have = _block_sums(np.asarray(loads, dtype=np.float64), W)  # [m, 2W − 2]: level l's 2^(l+1) halves
    dh = have[:, 0::2] - have[:, 1::2]  # [m, W − 1] node differences, heap order
    top = min(L, 4)  # levels of 1, 2, 4, 8 nodes in Python floats, the rest vectorised
    head = (1 << top) - 1
    dh_head = dh[:, :head].tolist()
    dh_lv = [dh[:, (1 << lv) - 1:(2 << lv) - 1] for lv in range(L)]  # [m, 2^l] per level
    halves = [np.empty(2 << lv, dtype=np.int64) for lv in range(L)]  # each level's next nodes, slot order
    total = np.zeros(W)
    carried = np.empty(2 * W - 2)  # the sums of ``total`` over every level's halves (as _block_sums)
    sums, s, o = [], W // 2, 0
    while s > 1:
        sums.append((total.reshape(W // s, s), carried[o:o + W // s]))
        o, s = o + W // s, s // 2
    # the last level's halves are single columns: their sums are the columns (a sum of one number)
    dc = np.empty(W - 1)
    dc_lv = [dc[(1 << lv) - 1:(2 << lv) - 1] for lv in range(L)]
    idx = np.empty((m, W), dtype=np.int64)
    for k in range(m):
        if k == 0:  # nothing carried yet: every slot difference 0, so no node swaps (the identity)
            idx[0] = np.arange(W)
            total += loads[0]
            continue
        for x, out in sums:
            np.add.reduce(x, axis=1, out=out)
        carried[W - 2:] = total
        np.subtract(carried[0::2], carried[1::2], out=dc)  # per slot pair, heap order
        dc_head = dc[:head].tolist()
        hk = dh_head[k]
        nodes = [0]
        for lv in range(top):
            off = (1 << lv) - 1
            nxt: list[int] = []
            for i, a in enumerate(nodes):
                if hk[off + a] * dc_head[off + i] > 0:
                    nxt += (2 * a + 1, 2 * a)
                else:
                    nxt += (2 * a, 2 * a + 1)
            nodes = nxt
        A = np.asarray(nodes, dtype=np.int64)
        for lv in range(top, L):
            A = _descend(A, (dh_lv[lv][k][A] * dc_lv[lv]) > 0, halves[lv])
        idx[k] = A
        total += loads[k][A]
    return _positions(pos, idx)


def _descend(nodes: np.ndarray, swap: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The next level's nodes in slot order: each node a's halves 2a, 2a + 1, swapped where ``swap``; into
    ``out`` (2 · len(nodes))."""
    first = nodes * 2
    first += swap  # the half that goes first: 2a, or 2a + 1 when node a swaps
    out[0::2] = first
    out[1::2] = first ^ 1
    return out


def _positions(pos: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``pos`` [m, W] filled with the new rank of each old rank, from ``idx`` [m, W] (the old rank at each new
    position)."""
    pos[np.arange(len(idx))[:, None], idx] = np.arange(idx.shape[1])[None, :]
    return pos


def _balance_slow(loads: np.ndarray, slow: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """:func:`balance_columns` with slow-down factors: per half, the time carried (Σ load × f over its
    columns) and the mean factor a load placed there runs at; node a at slot pair i swaps when that lowers the
    larger of the two projected times. The same sums and comparisons as the first version's loop, with the
    halves' loads read off the block sums (as in the loop without factors)."""
    m, W = loads.shape
    L = W.bit_length() - 1
    have = _block_sums(np.asarray(loads, dtype=np.float64), W)
    h0, h1 = have[:, 0::2], have[:, 1::2]  # [m, W − 1]: each node's two halves, heap order
    fac, s = [], W // 2
    while s >= 1:
        fac.append(slow.reshape(-1, 2, s).mean(axis=2))  # [2^l, 2] per level: the halves' mean factor
        s //= 2
    top = min(L, 4)  # levels of 1, 2, 4, 8 nodes in Python floats, the rest vectorised
    head = (1 << top) - 1
    fac_head = [f.tolist() for f in fac[:top]]
    h0_head, h1_head = h0[:, :head].tolist(), h1[:, :head].tolist()
    halves = [np.empty(2 << lv, dtype=np.int64) for lv in range(L)]
    total = np.zeros(W)
    idx = np.empty((m, W), dtype=np.int64)
    for k in range(m):
        carried = _block_sums(total * slow, W)  # level l's halves at 2^(l+1) − 2 ..
        c_head = carried[:2 * head].tolist()
        a0, a1 = h0_head[k], h1_head[k]
        nodes = [0]
        for lv in range(top):
            off = (1 << lv) - 1
            f = fac_head[lv]
            nxt: list[int] = []
            for i, a in enumerate(nodes):
                c0, c1 = c_head[2 * (off + i)], c_head[2 * (off + i) + 1]
                f0, f1 = f[i]
                x0, x1 = a0[off + a], a1[off + a]
                stay = max(c0 + x0 * f0, c1 + x1 * f1)
                swap = max(c0 + x1 * f0, c1 + x0 * f1)
                nxt += (2 * a + 1, 2 * a) if swap < stay else (2 * a, 2 * a + 1)
            nodes = nxt
        A = np.asarray(nodes, dtype=np.int64)
        for lv in range(top, L):
            off = (1 << lv) - 1
            c = carried[2 * off:2 * off + (2 << lv)].reshape(-1, 2)
            f = fac[lv]
            x0, x1 = h0[k, off + A], h1[k, off + A]
            stay = np.maximum(c[:, 0] + x0 * f[:, 0], c[:, 1] + x1 * f[:, 1])
            swap = np.maximum(c[:, 0] + x1 * f[:, 0], c[:, 1] + x0 * f[:, 1])
            A = _descend(A, swap < stay, halves[lv])
        idx[k] = A
        total += loads[k][A]
    return _positions(pos, idx)
