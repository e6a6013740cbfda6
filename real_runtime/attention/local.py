"""Local block attention that also returns the log-sum-exp, and the merge of partial results.

Every CP engine reduces to one primitive: attend a block of queries to a block of keys/values on one rank,
for many documents at once (varlen: documents given by cumulative lengths ``cu_seqlens_q``/``cu_seqlens_k``,
document ``d``'s queries attend only document ``d``'s keys), and return, besides the output ``O``, the
**log-sum-exp** of the scores of every query row::

    lse_i = log sum_j exp(s_ij),       O_i = sum_j exp(s_ij - lse_i) v_j,       s_ij = scale · q_i·k_j

Why the LSE matters: softmax over a union of key blocks can be computed block by block. If block A gave
``(O_A, lse_A)`` and block B gave ``(O_B, lse_B)``, the exact result over A ∪ B is::

    lse = log(exp(lse_A) + exp(lse_B))
    O   = exp(lse_A - lse) · O_A + exp(lse_B - lse) · O_B

(each partial output is renormalised by the share of the total mass its block holds). This is the
"online softmax" of FlashAttention, applied across ranks: ring attention merges one incoming key block per
step. A row that saw no key has ``lse = -inf`` and weight zero.

The backward needs only the *final* ``O`` and ``lse``: with ``P = exp(S - lse)`` (the final probabilities
restricted to this block) and ``D_i = sum_d dO_id · O_id``, a block contributes ``dV = Pᵀ dO``,
``dS = P ∘ (dO Vᵀ - D)``, ``dQ = scale · dS K`` and ``dK = scale · dSᵀ Q``, and the blocks' contributions
simply add. That is how flash-attn's backward kernel works, and why a ring backward can revisit blocks in any
order.

Tensors use the packed "THD" convention: ``q`` is ``[tokens, heads, head_dim]``, ``k``/``v`` are
``[tokens, kv_heads, head_dim]`` with ``kv_heads`` dividing ``heads`` (GQA: query head ``h`` uses kv head
``h // (heads / kv_heads)``), and ``lse`` is ``[tokens, heads]`` float32.

Causal masking inside a document pair uses the bottom-right convention of flash-attn ≥ 2.1: query ``i`` of a
segment of ``nq`` queries sees key ``j`` of ``nk`` keys iff ``j ≤ i + nk - nq``; the engines only use
``causal=True`` with ``nq == nk``, where it is plain "key index ≤ query index".
"""

from __future__ import annotations

import math

import torch

from dcpsim.real_runtime.attention.backend import AttentionBackend, Seqlens


def _check_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: Seqlens, cu_k: Seqlens) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape:
        raise ValueError(f"attention expects q [N, H, D] and k, v [N, Hkv, D] of equal shape; got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[1] % k.shape[1] or q.shape[2] != k.shape[2]:
        raise ValueError(f"attention: kv heads ({k.shape[1]}) must divide query heads ({q.shape[1]}) and "
                         f"head dims must match ({q.shape[2]} vs {k.shape[2]})")
    if len(cu_q) != len(cu_k) or cu_q[-1] != q.shape[0] or cu_k[-1] != k.shape[0]:
        raise ValueError(f"attention: cu_seqlens_q (ends at {cu_q[-1]}, {len(cu_q) - 1} docs) and "
                         f"cu_seqlens_k (ends at {cu_k[-1]}, {len(cu_k) - 1} docs) must describe the same "
                         f"documents over {q.shape[0]} query and {k.shape[0]} key tokens")


class MathBackend:
    """Explicit attention math in float32, one document at a time (memory ∝ the largest document's
    ``nq · nk · heads``). Reference quality; use on CPU and for checking faster kernels."""

    name = "math"

    @staticmethod
    def _scores(qd: torch.Tensor, kd: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
        """Masked scores ``[Hkv, G, nq, nk]`` in float32 for one document (queries grouped by kv head)."""
        nq, h, dim = qd.shape
        nk, hkv, _ = kd.shape
        qg = qd.float().reshape(nq, hkv, h // hkv, dim).permute(1, 2, 0, 3)  # [Hkv, G, nq, D]
        kg = kd.float().permute(1, 0, 2)  # [Hkv, nk, D]
        s = torch.einsum("hgqd,hkd->hgqk", qg, kg) * scale
        if causal:
            i = torch.arange(nq, device=qd.device).unsqueeze(1)
            j = torch.arange(nk, device=qd.device).unsqueeze(0)
            s = s.masked_fill(j > i + (nk - nq), float("-inf"))
        return s

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: Seqlens, cu_k: Seqlens,
                causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        _check_varlen(q, k, v, cu_q, cu_k)
        n, h, dim = q.shape
        out = torch.zeros(n, h, dim, dtype=torch.float32, device=q.device)
        lse = torch.full((n, h), float("-inf"), dtype=torch.float32, device=q.device)
        for d in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[d], cu_q[d + 1], cu_k[d], cu_k[d + 1]
            if q1 == q0 or k1 == k0:
                continue
            s = self._scores(q[q0:q1], k[k0:k1], causal, scale)
            l_ = torch.logsumexp(s, dim=-1)  # [Hkv, G, nq]
            p = torch.exp(s - torch.where(torch.isfinite(l_), l_, 0.0).unsqueeze(-1))
            vg = v[k0:k1].float().permute(1, 0, 2)  # [Hkv, nk, D]
            o = torch.einsum("hgqk,hkd->hgqd", p, vg)
            out[q0:q1] = o.permute(2, 0, 1, 3).reshape(q1 - q0, h, dim)
            lse[q0:q1] = l_.permute(2, 0, 1).reshape(q1 - q0, h)
        return out.to(q.dtype), lse

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor, lse: torch.Tensor, cu_q: Seqlens, cu_k: Seqlens, causal: bool,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _check_varlen(q, k, v, cu_q, cu_k)
        n, h, dim = q.shape
        hkv = k.shape[1]
        g = h // hkv
        dq = torch.zeros(n, h, dim, dtype=torch.float32, device=q.device)
        dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        for d in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[d], cu_q[d + 1], cu_k[d], cu_k[d + 1]
            nq = q1 - q0
            if nq == 0 or k1 == k0:
                continue
            s = self._scores(q[q0:q1], k[k0:k1], causal, scale)
            l_ = lse[q0:q1].reshape(nq, hkv, g).permute(1, 2, 0)  # [Hkv, G, nq]
            p = torch.exp(s - torch.where(torch.isfinite(l_), l_, 0.0).unsqueeze(-1))

            do, o, qg = (t[q0:q1].float().reshape(nq, hkv, g, dim).permute(1, 2, 0, 3)  # [Hkv, G, nq, D]
                         for t in (dout, out, q))
            kg = k[k0:k1].float().permute(1, 0, 2)
            vg = v[k0:k1].float().permute(1, 0, 2)
            delta = (do * o).sum(-1, keepdim=True)  # [Hkv, G, nq, 1]
            dv[k0:k1] = torch.einsum("hgqk,hgqd->khd", p, do)
            ds = p * (torch.einsum("hgqd,hkd->hgqk", do, vg) - delta)
            dq[q0:q1] = (torch.einsum("hgqk,hkd->hgqd", ds, kg) * scale).permute(2, 0, 1, 3).reshape(nq, h, dim)
            dk[k0:k1] = torch.einsum("hgqk,hgqd->khd", ds, qg) * scale
        return dq, dk, dv


def default_scale(head_dim: int) -> float:
    """The usual softmax scale ``1/sqrt(head_dim)``."""
    return 1.0 / math.sqrt(head_dim)


def resolve_backend(backend: AttentionBackend | str | None, q: torch.Tensor) -> AttentionBackend:
    """Pick a kernel: an object is used as is; ``"math"`` → :class:`MathBackend`; ``"flash"`` → flash-attn
    (error if missing); ``None``/``"auto"`` → flash-attn for CUDA fp16/bf16 tensors (head_dim a multiple of 8) when it
    is installed, otherwise the math backend."""
    if backend is not None and not isinstance(backend, str):
        return backend
    name = backend or "auto"
    if name == "math":
        return MathBackend()
    if name in ("flash", "auto"):
        from dcpsim.real_runtime.attention.flash import FlashAttnBackend, flash_attn_available

        usable = (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] % 8 == 0
                  and flash_attn_available())
        if name == "flash":
            if not usable:
                raise ValueError("backend 'flash' needs flash-attn installed and CUDA fp16/bf16 tensors")
            return FlashAttnBackend()
        return FlashAttnBackend() if usable else MathBackend()
    raise ValueError(f"unknown attention backend {backend!r}; valid: 'auto', 'math', 'flash', or an object")


def merge_partials(out: torch.Tensor, lse: torch.Tensor, blk_out: torch.Tensor,
                   blk_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two partial attentions of the same query rows over disjoint key sets (see module doc).

    ``out``/``blk_out`` are ``[N, H, D]``, ``lse``/``blk_lse`` ``[N, H]``; returns the merged pair in float32.
    Rows where both sides saw no key stay ``(0, -inf)``.
    """
    new = torch.logaddexp(lse, blk_lse)
    ref = torch.where(torch.isfinite(new), new, 0.0)
    w_old = torch.exp(lse - ref).unsqueeze(-1)
    w_blk = torch.exp(blk_lse - ref).unsqueeze(-1)
    return w_old * out.float() + w_blk * blk_out.float(), new


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu, causal, scale, backend):
        out, lse = backend.forward(q, k, v, cu, cu, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (cu, causal, scale, backend)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        cu, causal, scale, backend = ctx.args
        dq, dk, dv = backend.backward(dout.contiguous(), q, k, v, out, lse, cu, cu, causal, scale)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: Seqlens, *,
                     causal: bool = True, scale: float | None = None,
                     backend: AttentionBackend | str | None = None) -> torch.Tensor:
    """Single-rank attention over packed documents (document mask; causal by default), differentiable.

    The degree-1 "engine": a sequence that a plan runs alone on one rank needs nothing else.
    """
    cu = tuple(int(x) for x in cu_seqlens)
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    return _VarlenAttention.apply(q, k, v, cu, causal, scale, resolve_backend(backend, q))
