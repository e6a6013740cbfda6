"""A small Llama-style decoder for the runner, sized from a ``cost_models`` :class:`ModelSpec`.

Architecture (Llama 2/3): token embedding; per layer ``x + Attn(RMSNorm(x))`` then ``x + MLP(RMSNorm(x))``;
a final RMSNorm and an untied output projection to the vocabulary. Attention uses grouped-query heads
(``kv_heads`` key/value heads shared by ``heads / kv_heads`` query heads each), rotary position embeddings
(RoPE, rotate-half form, base θ = 10000) and no biases; the MLP is SwiGLU, ``W2 (silu(W1 x) ⊙ W3 x)``.

The model works on *packed* tokens ``[n]`` of one rank, never on a padded ``[batch, seq]`` grid. Positions
are passed in (they restart at 0 in every document, and under context parallelism a rank's tokens are not
contiguous), and attention is a function handed to :meth:`Decoder.forward`: the runner passes the CP engine of
the rank's group (``cp_attention`` over a dual-chunk shard) or ``varlen_attention`` for a group of one. So
the same weights run single-process and sharded, which is what lets the runner's losses be checked against a
single-process run.

Initialisation is deterministic: :func:`build_model` seeds a private generator, normal(0, 0.02) for every
matrix (output projections scaled by 1/√(2·layers), as GPT-2 does), ones for the norms.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dcpsim.cost_models.specs import ModelSpec

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # q [n,H,d], k, v [n,Hkv,d]


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) · weight, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float = 10000.0,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[n, 1, head_dim]`` of rotary embeddings at integer ``positions`` ``[n]``."""
    half = head_dim // 2
    inv = theta ** (-torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)[:, None, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on ``x [n, heads, head_dim]``."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    """GQA self-attention projections around an externally supplied attention function."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.heads, spec.kv_heads, spec.head_dim
        self.wq = nn.Linear(spec.hidden, spec.heads * spec.head_dim, bias=False)
        self.wk = nn.Linear(spec.hidden, spec.kv_heads * spec.head_dim, bias=False)
        self.wv = nn.Linear(spec.hidden, spec.kv_heads * spec.head_dim, bias=False)
        self.wo = nn.Linear(spec.heads * spec.head_dim, spec.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionFn) -> torch.Tensor:
        n = x.shape[0]
        q = apply_rope(self.wq(x).view(n, self.heads, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(n, self.kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(n, self.kv_heads, self.head_dim)
        o = attn(q.contiguous(), k.contiguous(), v.contiguous())
        return self.wo(o.reshape(n, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(spec.hidden)
        self.attn = Attention(spec)
        self.mlp_norm = RMSNorm(spec.hidden)
        self.mlp = SwiGLU(spec.hidden, spec.ffn)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionFn) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, attn)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """Embedding, ``spec.layers`` blocks, final norm, output projection."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if spec.head_dim % 2:
            raise ValueError(f"model {spec.name}: RoPE needs an even head_dim, got {spec.head_dim}")
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab, spec.hidden)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.layers))
        self.norm = RMSNorm(spec.hidden)
        self.lm_head = nn.Linear(spec.hidden, spec.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attn: AttentionFn) -> torch.Tensor:
        """Logits ``[n, vocab]`` (float32) of packed ``tokens [n]`` at ``positions [n]``."""
        x = self.embed(tokens)
        cos, sin = rope_cos_sin(positions, self.spec.head_dim, dtype=x.dtype)
        for blk in self.blocks:
            x = blk(x, cos, sin, attn)
        return self.lm_head(self.norm(x)).float()


def build_model(spec: ModelSpec, seed: int = 0, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> Decoder:
    """A :class:`Decoder` with deterministic weights (same ``seed`` → same weights on every process)."""
    model = Decoder(spec)
    gen = torch.Generator().manual_seed(int(seed))
    out_scale = 1.0 / math.sqrt(2 * spec.layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                std = 0.02 * (out_scale if name.endswith(("wo.weight", "w2.weight")) else 1.0)
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return model.to(device=device, dtype=dtype)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of the cross-entropy of every position with a target (labels = -100 elsewhere)."""
    return F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
