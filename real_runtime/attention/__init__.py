"""Context-parallel attention engines in torch (needs torch; the rest of dcpsim does not).

Modules, one idea each:

* :mod:`.layout`: the dual-chunk placement of packed documents on a CP group, padding, shard/unshard;
* :mod:`.backend`: the interface of a varlen block-attention kernel (:class:`AttentionBackend`);
* :mod:`.local`: single-rank varlen block attention with log-sum-exp, LSE merging, kernel backends;
* :mod:`.flash`: the optional flash-attn backend (CUDA only, imported lazily);
* :mod:`.comm`: a CP group's process groups (:class:`CPComm`), ring send/recv, Ulysses all-to-all, gather;
* :mod:`.ring`: ring attention forward/backward with dual-chunk balancing;
* :mod:`.engines`: the public engines (ring, Ulysses, hierarchical) over one shared input layout;
* :mod:`.reference`: a dense single-process reference for tests.

Typical use on every member of a CP group::

    comm = new_cp_comm(group_ranks, ulysses=engine.ulysses)      # collective over the world
    layout = DualChunkLayout.build(doc_lengths, degree=len(group_ranks))
    q_l, k_l, v_l = (layout.shard(t, comm.rank) for t in (q, k, v))
    out_l = cp_attention(q_l, k_l, v_l, layout, comm)
    out = gather_packed(out_l, layout, comm)                        # optional, for checks
"""

from dcpsim.real_runtime.attention.backend import AttentionBackend
from dcpsim.real_runtime.attention.comm import (
    CPComm,
    gather_packed,
    head_to_seq,
    new_cp_comm,
    new_cp_comm_for_group,
    seq_to_head,
)
from dcpsim.real_runtime.attention.engines import (
    CPAttentionError,
    cp_attention,
    hybrid_attention,
    ring_attention,
    ulysses_attention,
    ulysses_gather_order,
)
from dcpsim.real_runtime.attention.layout import DualChunkLayout, cu_seqlens_from_lengths
from dcpsim.real_runtime.attention.local import (
    MathBackend,
    default_scale,
    merge_partials,
    resolve_backend,
    varlen_attention,
)
from dcpsim.real_runtime.attention.reference import document_causal_mask, reference_attention

__all__ = [
    "AttentionBackend", "CPAttentionError", "CPComm", "DualChunkLayout", "MathBackend", "cp_attention",
    "cu_seqlens_from_lengths", "default_scale", "document_causal_mask", "gather_packed", "head_to_seq",
    "hybrid_attention", "merge_partials", "new_cp_comm", "new_cp_comm_for_group", "reference_attention",
    "resolve_backend",
    "ring_attention", "seq_to_head", "ulysses_attention", "ulysses_gather_order", "varlen_attention",
]
