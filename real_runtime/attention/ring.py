"""Ring attention with dual-chunk load balancing over packed, causal documents.

Setting: ``r`` ranks in a ring, each holding the dual-chunk shard (see :mod:`.layout`) of every document:
its queries ``Q_j`` and its keys/values ``KV_j``. Attention of ``Q_j`` needs every ``KV`` block, so the K/V
blocks travel around the ring: at step ``s`` rank ``j`` holds the block of rank ``src = (j - s) mod r``, sends
it on to ``j + 1`` while computing with it, and merges the partial result with the LSE rule of
:mod:`.local`. Which part of a step's block is visible follows from the chunk order (chunk ``x`` is before
chunk ``y`` iff ``x < y``; rank ``j`` holds chunks ``j`` and ``2r-1-j``):

* step 0 (``src == j``): own block, causal. Local index order equals position order in every document, so a
  plain causal varlen kernel over the front+back pieces is exact.
* ``src < j``: chunk ``src`` lies before both of my chunks and chunk ``2r-1-src`` after both: all my queries
  attend the *front halves* of the incoming block, unmasked.
* ``src > j``: my front chunk ``j`` is before everything incoming (it sees nothing); my back chunk
  ``2r-1-j`` is after everything incoming: the *back halves* of my queries attend the whole block, unmasked.

So after step 0 every rank computes exactly half a block per step: the balance that the layout buys.
(Pads sit after all real tokens of their document, so these rules hold with padding too.)

Backward (custom autograd): the forward saves only ``q, k, v, out, lse``. The backward sends the K/V blocks
around the ring again together with a travelling gradient accumulator ``dK, dV`` per block: at step ``s`` a
rank adds its contribution to the block it holds and passes the accumulator on with the block; after ``r``
hops every accumulator is back at its owner, complete. ``dQ`` stays local. This recomputes the scores
instead of storing ``r`` blocks of probabilities, as flash-attn-based ring implementations do.
"""

from __future__ import annotations

import numpy as np
import torch

from dcpsim.real_runtime.attention.backend import AttentionBackend
from dcpsim.real_runtime.attention.comm import CPComm, RingShift
from dcpsim.real_runtime.attention.layout import DualChunkLayout
from dcpsim.real_runtime.attention.local import merge_partials


def _index(ix: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(ix, device=device)


def ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DualChunkLayout, comm: CPComm,
                 backend: AttentionBackend, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward pass of ring attention; returns ``(out float32 [n, H, D], lse [n, H])``. ``layout.degree``
    must equal ``comm.ring``; this rank is ring member ``comm.ring_rank``."""
    r, j = comm.ring, comm.ring_rank
    cu, cu_half = layout.local_cu_seqlens, layout.half_cu_seqlens
    front, back = _index(layout.front_index, q.device), _index(layout.back_index, q.device)
    pending = RingShift(torch.stack([k, v]), comm) if r > 1 else None  # overlaps the first block
    out, lse = backend.forward(q, k, v, cu, cu, True, scale)
    out = out.float()
    for step in range(1, r):
        assert pending is not None
        kv = pending.wait()
        if step + 1 < r:
            pending = RingShift(kv, comm)
        src = (j - step) % r
        if src < j:
            o, l_ = backend.forward(q, kv[0].index_select(0, front), kv[1].index_select(0, front),
                                    cu, cu_half, False, scale)
            out, lse = merge_partials(out, lse, o, l_)
        else:
            o, l_ = backend.forward(q.index_select(0, back), kv[0], kv[1], cu_half, cu, False, scale)
            o_m, l_m = merge_partials(out.index_select(0, back), lse.index_select(0, back), o, l_)
            out = out.index_copy(0, back, o_m)
            lse = lse.index_copy(0, back, l_m)
    return out, lse


def ring_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, layout: DualChunkLayout, comm: CPComm, backend: AttentionBackend,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward pass of ring attention; returns float32 ``(dq, dk, dv)`` for this rank's shard."""
    r, j = comm.ring, comm.ring_rank
    cu, cu_half = layout.local_cu_seqlens, layout.half_cu_seqlens
    front, back = _index(layout.front_index, q.device), _index(layout.back_index, q.device)
    kv = torch.stack([k, v])
    kv_next = RingShift(kv, comm) if r > 1 else None
    dq, dk, dv = backend.backward(dout, q, k, v, out, lse, cu, cu, True, scale)
    dkv = torch.stack([dk, dv])  # accumulator of the block this rank holds at the current step
    if r == 1:
        return dq, dkv[0], dkv[1]
    dkv_next = RingShift(dkv, comm)
    dout_b, q_b, out_b, lse_b = (t.index_select(0, back) for t in (dout, q, out, lse))
    for step in range(1, r):
        assert kv_next is not None
        kv = kv_next.wait()
        if step + 1 < r:
            kv_next = RingShift(kv, comm)
        src = (j - step) % r
        blk = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        if src < j:
            dq_s, dk_s, dv_s = backend.backward(dout, q, kv[0].index_select(0, front),
                                                kv[1].index_select(0, front), out, lse, cu, cu_half, False,
                                                scale)
            dq = dq + dq_s
            blk[0].index_copy_(0, front, dk_s)
            blk[1].index_copy_(0, front, dv_s)
        else:
            dq_s, dk_s, dv_s = backend.backward(dout_b, q_b, kv[0], kv[1], out_b, lse_b, cu_half, cu, False,
                                                scale)
            dq = dq.index_add(0, back, dq_s)
            blk[0], blk[1] = dk_s, dv_s
        dkv = dkv_next.wait() + blk
        dkv_next = RingShift(dkv, comm)
    dkv = dkv_next.wait()  # after r hops the accumulator of my own block is home, complete
    return dq, dkv[0], dkv[1]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, layout, comm, backend, scale):
        out, lse = ring_forward(q, k, v, layout, comm, backend, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (layout, comm, backend, scale)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        layout, comm, backend, scale = ctx.args
        dq, dk, dv = ring_backward(dout.contiguous(), q, k, v, out, lse, layout, comm, backend, scale)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


def ring_attention_shard(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DualChunkLayout,
                         comm: CPComm, backend: AttentionBackend, scale: float) -> torch.Tensor:
    """Differentiable ring attention over ``comm``'s ring (degree ``comm.ring`` = ``layout.degree``) for
    already-validated inputs. Public entry points live in :mod:`.engines`."""
    return _RingAttention.apply(q, k, v, layout, comm, backend, scale)
