"""Single-process reference attention for checking the CP engines.

Deliberately independent of :mod:`.local`: it builds the full ``T × T`` document-causal mask and lets torch
autograd differentiate a plain softmax, in any dtype (float64 for tight comparisons). Memory is ``O(T²·H)``,
so it is for tests and spot checks, not for training.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch


def document_causal_mask(cu_seqlens: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """Boolean ``[T, T]`` mask, True where query ``i`` may attend key ``j``: same document and ``j ≤ i``."""
    lengths = torch.tensor([b - a for a, b in itertools.pairwise(cu_seqlens)], device=device)
    doc = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths)
    idx = torch.arange(int(cu_seqlens[-1]), device=device)
    return (doc[:, None] == doc[None, :]) & (idx[None, :] <= idx[:, None])


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: Sequence[int],
                        scale: float | None = None) -> torch.Tensor:
    """Causal document-masked attention of packed ``q [T, H, D]``, ``k, v [T, Hkv, D]`` (GQA allowed)."""
    h, hkv, d = q.shape[1], k.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kf = k.repeat_interleave(h // hkv, dim=1)
    vf = v.repeat_interleave(h // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, kf) * scale
    s = s.masked_fill(~document_causal_mask(cu_seqlens, q.device), float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), vf)
