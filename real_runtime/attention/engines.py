"""The CP attention engines: ring, Ulysses, and hierarchical (Ulysses nested in a ring).

All three take the same inputs, so a runner can switch engines without re-sharding: every member of a CP
group of ``c`` ranks holds its **dual-chunk shard of degree c** (:class:`~.layout.DualChunkLayout`) of
``q [n, H, D]``, ``k, v [n, Hkv, D]``, and gets back its shard of the output.

Hierarchical ``(u, r)`` with ``c = u · r``, group rank ``g = j·u + i``: the ``u`` members of outer group ``j``
hold chunks ``j·u .. j·u+u-1`` (which together form chunk ``j`` of the *degree-r* dual-chunk split) and the
mirrored chunks ``2c-1-j·u-i`` (together: chunk ``2r-1-j`` of the degree-r split, in reverse member order).
So one all-to-all inside the outer group, which trades "my tokens, all heads" for "the outer group's tokens,
``H/u`` heads", followed by a fixed permutation (:func:`ulysses_gather_order`), yields exactly the degree-r
dual-chunk shard for a head slice. Ring attention over the ``r`` outer groups (one ring per head slice)
then runs unchanged, and the inverse permutation and all-to-all bring the output back. Pure Ulysses is
``r = 1`` (the ring step is plain local causal attention over whole documents); pure ring is ``u = 1``.

Heads: Ulysses splits query heads and kv heads alike, so ``u`` must divide both (``ValueError`` otherwise);
with GQA the query head ``h`` of slice ``i`` still finds its kv head ``h // (H/Hkv)`` inside slice ``i``.

Gradients: the all-to-alls are autograd functions whose backward is the opposite all-to-all; the
permutations are ``index_select``; the ring has its own backward (:mod:`.ring`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from dcpsim.real_runtime.attention.backend import AttentionBackend
from dcpsim.real_runtime.attention.comm import CPComm, head_to_seq, seq_to_head
from dcpsim.real_runtime.attention.layout import DualChunkLayout
from dcpsim.real_runtime.attention.local import default_scale, resolve_backend
from dcpsim.real_runtime.attention.ring import ring_attention_shard


class CPAttentionError(ValueError):
    """Inputs that no CP engine can run: shapes, head counts or layouts that do not fit the group."""


@lru_cache(maxsize=256)
def _gather_order(chunk_sizes: tuple[int, ...], u: int) -> tuple[np.ndarray, np.ndarray]:
    n = 2 * sum(chunk_sizes)
    parts = []
    offset = 0
    for s in chunk_sizes:
        parts += [np.arange(i * n + offset, i * n + offset + s) for i in range(u)]
        parts += [np.arange(i * n + offset + s, i * n + offset + 2 * s) for i in reversed(range(u))]
        offset += 2 * s
    order = np.concatenate(parts).astype(np.int64)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    order.flags.writeable = False
    inverse.flags.writeable = False
    return order, inverse


def ulysses_gather_order(layout: DualChunkLayout, ulysses: int) -> tuple[np.ndarray, np.ndarray]:
    """Permutation ``order`` (and its inverse) such that ``gathered[order]`` is the degree-``r`` dual-chunk
    shard, where ``gathered`` is the all-to-all result (the ``u`` members' degree-``c`` shards one after
    another). Per document: the members' front chunks in member order, then their back chunks in reverse."""
    return _gather_order(layout.chunk_sizes, int(ulysses))


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DualChunkLayout,
                 comm: CPComm) -> None:
    """Raise :class:`CPAttentionError` (a ``ValueError``) naming what does not fit."""
    if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape:
        raise CPAttentionError(f"CP attention expects q [n, H, D], k and v [n, Hkv, D]; got q {tuple(q.shape)},"
                               f" k {tuple(k.shape)}, v {tuple(v.shape)}")
    h, hkv = q.shape[1], k.shape[1]
    if h % hkv or q.shape[2] != k.shape[2]:
        raise CPAttentionError(f"CP attention: kv heads {hkv} must divide query heads {h}, head dims must "
                               f"match ({q.shape[2]} vs {k.shape[2]})")
    if layout.degree != comm.size:
        raise CPAttentionError(f"CP attention: layout is for {layout.degree} ranks, the CP group has "
                               f"{comm.size} ({comm.ranks})")
    if q.shape[0] != layout.local_tokens or k.shape[0] != layout.local_tokens:
        raise CPAttentionError(f"CP attention: this rank's shard must have {layout.local_tokens} tokens "
                               f"(layout {layout.lengths} on {layout.degree} ranks), got q {q.shape[0]}, "
                               f"k {k.shape[0]}")
    u = comm.ulysses
    if h % u or hkv % u:
        raise CPAttentionError(f"Ulysses degree {u} must divide the query heads ({h}) and the kv heads "
                               f"({hkv}); choose a Ulysses degree among the common divisors")


def cp_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DualChunkLayout, comm: CPComm, *,
                 scale: float | None = None, backend: AttentionBackend | str | None = None) -> torch.Tensor:
    """Causal document-masked attention of a packed batch sharded over a CP group, differentiable.

    ``q, k, v`` are this member's dual-chunk shard (``layout.shard(global, comm.rank)``); the engine is
    ``comm``'s: ring (``u = 1``), Ulysses (``r = 1``) or hierarchical. Returns this member's output shard
    (pad rows are meaningless; :meth:`DualChunkLayout.unshard` drops them).
    """
    check_inputs(q, k, v, layout, comm)
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    kernel = resolve_backend(backend, q)
    u, r = comm.ulysses, comm.ring
    if u == 1:
        return ring_attention_shard(q, k, v, layout, comm, kernel, scale)
    order, inverse = ulysses_gather_order(layout, u)
    order_t = torch.tensor(order, device=q.device)
    inverse_t = torch.tensor(inverse, device=q.device)
    qh, kh, vh = (seq_to_head(t.contiguous(), comm).index_select(0, order_t) for t in (q, k, v))
    out_h = ring_attention_shard(qh, kh, vh, layout.with_degree(r), comm, kernel, scale)
    return head_to_seq(out_h.index_select(0, inverse_t).contiguous(), comm)


def _require(comm: CPComm, kind: str, ok: bool) -> None:
    if not ok:
        raise CPAttentionError(f"{kind} attention needs a CPComm of that kind; got ulysses={comm.ulysses}, "
                               f"ring={comm.ring} (use cp_attention for any engine)")


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DualChunkLayout, comm: CPComm,
                   **kw) -> torch.Tensor:
    """Pure ring attention (``comm.ulysses == 1``); see :func:`cp_attention`."""
    _require(comm, "ring", comm.ulysses == 1)
    return cp_attention(q, k, v, layout, comm, **kw)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DualChunkLayout,
                      comm: CPComm, **kw) -> torch.Tensor:
    """Pure Ulysses attention (``comm.ring == 1``); see :func:`cp_attention`."""
    _require(comm, "Ulysses", comm.ring == 1)
    return cp_attention(q, k, v, layout, comm, **kw)


def hybrid_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DualChunkLayout,
                     comm: CPComm, **kw) -> torch.Tensor:
    """Hierarchical attention: Ulysses over ``comm.ulysses`` inner ranks in a ring of ``comm.ring`` outer
    groups; see :func:`cp_attention`."""
    return cp_attention(q, k, v, layout, comm, **kw)
