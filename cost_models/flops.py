"""FLOP counts of one transformer layer (docs/cost_model.md). Pure functions of the model spec, vectorised over lengths.

Sources: the usual 2 FLOPs per multiply-accumulate; the linear-layer count is 2 x (parameters of the layer's
matrices) per token, = 4h²(1 + g/a) + 6hf for a SwiGLU layer with GQA when a·d = h; causal attention costs
half of the 4·L²·d·a of full attention (QKᵀ and PV). Backward: 2x forward for GEMMs; 2.5x forward for
FlashAttention's backward (it recomputes the scores; FlashAttention-2 paper, Dao 2023).
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.specs import ModelSpec

LINEAR_BWD_FACTOR = 2.0
ATTENTION_BWD_FACTOR = 2.5


def linear_fwd_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token per layer of the QKV/O projections and the MLP. For a MoE model: the mean over
    layers of what one token uses (router, its k routed experts, the shared expert; ModelSpec's
    active_params_per_layer), the count that MoE model cards and MFU use."""
    if model.is_moe:
        return 2.0 * model.active_params_per_layer
    return 2.0 * model.params_per_layer


def attention_fwd_flops(lengths: np.ndarray | float, model: ModelSpec, causal: bool = True) -> np.ndarray:
    """Forward FLOPs of attention (scores and weighted sum) of one sequence of ``lengths`` tokens, one layer,
    all query heads: 2·L²·d·a causal, 4·L²·d·a non-causal."""
    L = np.asarray(lengths, dtype=np.float64)
    return (2.0 if causal else 4.0) * L * L * model.head_dim * model.heads


def lm_head_fwd_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token of the output projection to the vocabulary."""
    return 2.0 * model.hidden * model.vocab


def model_flops(lengths: np.ndarray, model: ModelSpec) -> float:
    """Model FLOPs of one training step (forward + backward = 3x forward, the MFU convention of the
    PaLM and Megatron papers) over sequences of ``lengths``: all layers, causal attention, the LM head.
    Recomputation is not counted."""
    L = np.asarray(lengths, dtype=np.float64)
    per_layer = linear_fwd_flops_per_token(model) * L.sum() + attention_fwd_flops(L, model).sum()
    return float(3.0 * (model.layers * per_layer + lm_head_fwd_flops_per_token(model) * L.sum()))
