"""The interface of a varlen block-attention kernel pair (:class:`AttentionBackend`) and the cumulative
sequence lengths it takes (``Seqlens``). Implementations: ``local.MathBackend`` (explicit float32 math, any
device) and ``flash.FlashAttnBackend`` (flash-attn, CUDA); ``local.resolve_backend`` picks one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

Seqlens = Sequence[int]


class AttentionBackend(Protocol):
    """A varlen block-attention kernel pair. Implementations: ``local.MathBackend`` (explicit float32 math,
    any device) and, when installed, ``flash.FlashAttnBackend``."""

    name: str

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: Seqlens, cu_k: Seqlens,
                causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(out [Nq, H, D] in q's dtype, lse [Nq, H] float32)``."""
        ...

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor, lse: torch.Tensor, cu_q: Seqlens, cu_k: Seqlens, causal: bool,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(dq, dk, dv)`` float32 for this block, given the *final* ``out`` and ``lse`` rows."""
        ...
