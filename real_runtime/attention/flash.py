"""Optional flash-attn (v2) kernels behind the :class:`~real_runtime.attention.backend.AttentionBackend`
protocol, for CUDA fp16/bf16 tensors.

Nothing here is imported unless flash-attn is asked for (or ``"auto"`` finds it on a CUDA fp16/bf16 input), so
CPU-only installs never touch it. The forward uses flash-attn's public ``flash_attn_varlen_func`` with
``return_attn_probs=True`` (which returns the LSE); the block backward needs the *global* output and LSE,
which only the private ``_flash_attn_varlen_backward`` accepts, and its keyword set changed across 2.x
releases, so we pass only the keywords its signature has.

Status: written against flash-attn 2.5–2.8; validated only by ``tests/real_runtime/test_local_attention.py``
on machines with a GPU and flash-attn (skipped elsewhere).
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
from typing import Any

import torch

from dcpsim.real_runtime.attention.backend import Seqlens


def flash_attn_available() -> bool:
    """Whether flash-attn is importable here (without importing it)."""
    return importlib.util.find_spec("flash_attn") is not None


def _cu(cu: Seqlens, device: torch.device) -> torch.Tensor:
    return torch.tensor(list(cu), dtype=torch.int32, device=device)


def _max_len(cu: Seqlens) -> int:
    return max((b - a for a, b in itertools.pairwise(cu)), default=0)


_NEWEST_KEYWORDS = ("window_size_left", "window_size_right", "softcap", "alibi_slopes", "deterministic",
                    "rng_state")


def _parameter_names(fn: Any) -> tuple[str, ...]:
    """Keyword names of ``fn`` (a plain function, or a ``torch.library.custom_op`` wrapping one)."""
    for target in (getattr(fn, "_init_fn", None), fn):
        if target is None:
            continue
        try:
            return tuple(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            continue
    return _NEWEST_KEYWORDS


class FlashAttnBackend:
    """flash-attn 2 varlen kernels (GQA native; head_dim a multiple of 8, ≤ 256)."""

    name = "flash"

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: Seqlens, cu_k: Seqlens,
                causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        from flash_attn import flash_attn_varlen_func

        out, lse, _ = flash_attn_varlen_func(
            q, k, v, _cu(cu_q, q.device), _cu(cu_k, q.device), _max_len(cu_q), _max_len(cu_k),
            dropout_p=0.0, softmax_scale=scale, causal=causal, return_attn_probs=True)
        if lse.dim() != 2:
            raise RuntimeError(f"flash-attn returned an LSE of shape {tuple(lse.shape)}; this adapter needs "
                               "the varlen [heads, tokens] layout of flash-attn ≥ 2.4")
        return out, lse.transpose(0, 1).float()

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor, lse: torch.Tensor, cu_q: Seqlens, cu_k: Seqlens, causal: bool,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        from flash_attn.flash_attn_interface import _flash_attn_varlen_backward as bwd

        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        kwargs: dict[str, Any] = {
            "dout": dout.contiguous(), "q": q.contiguous(), "k": k.contiguous(), "v": v.contiguous(),
            "out": out.to(q.dtype).contiguous(), "softmax_lse": lse.transpose(0, 1).contiguous(),
            "dq": dq, "dk": dk, "dv": dv, "cu_seqlens_q": _cu(cu_q, q.device),
            "cu_seqlens_k": _cu(cu_k, q.device), "max_seqlen_q": _max_len(cu_q),
            "max_seqlen_k": _max_len(cu_k), "dropout_p": 0.0, "softmax_scale": scale, "causal": causal}
        optional: dict[str, Any] = {"window_size": (-1, -1), "window_size_left": -1, "window_size_right": -1,
                                    "softcap": 0.0, "alibi_slopes": None, "deterministic": False,
                                    "rng_state": None}
        kwargs.update({n: val for n, val in optional.items() if n in _parameter_names(bwd)})
        bwd(**kwargs)
        return dq.float(), dk.float(), dv.float()
