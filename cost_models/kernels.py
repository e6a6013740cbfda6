"""Memory-bound operators of a transformer layer, priced by the bytes they move at the GPU's HBM bandwidth.

Per token per layer, bf16 (2 bytes) values, with the fusions Megatron-Core + TransformerEngine apply by default
(TE ``LayerNormLinear`` / ``LayerNormMLP``: the norm is one kernel that writes its output for the GEMM;
``apply_rope_fusion``: TE's fused RoPE; ``bias_swiglu_fusion`` / ``bias_gelu_fusion``: one activation kernel;
``bias_dropout_fusion``: the residual add, no dropout at rate 0):

==================  ====================================  =========================================
operator            forward bytes                         backward bytes
==================  ====================================  =========================================
2 norms             2 × (read x 2h + write 2h) = 8h        2 × (read x, dy; write dx) = 12h
RoPE on Q, K        read + write 2(a + g)d each: 4(a+g)d   the same: 4(a + g)d
SwiGLU              read gate, up 4f; write 2f = 6f        read dy 2f, gate, up 4f; write 4f = 10f
GELU / squared ReLU read 2f; write 2f = 4f                 read dy, x 4f; write 2f = 6f
2 residual adds     2 × (read 4h + write 2h) = 12h         2 × (gradient accumulate, 6h) = 12h
==================  ====================================  =========================================

Everything is split over the t GPUs of the TP group (sequence parallelism shards h, TP the heads and f). A MoE
layer's activation runs on its k routed experts' f_e (and the shared expert's f_s). The time is bytes over
``gpu.hbm_bw_gbs``, the data sheet's bandwidth: an upper bound on what these kernels achieve, so this term is a
lower bound on their time (their launch floors are the fixed costs' kernels). The attention kernel, the GEMMs,
the embedding, the loss and the optimizer are priced elsewhere.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.moe import stage_layers
from dcpsim.cost_models.specs import JobSpec, ModelSpec

BF16 = 2.0


def _activation_bytes(model: ModelSpec, f: float) -> tuple[float, float]:
    """(forward, backward) bytes per token of the MLP activation over an intermediate of f values."""
    if model.mlp == "swiglu":
        return 6.0 * f, 10.0 * f
    return 4.0 * f, 6.0 * f


def layer_bytes(model: ModelSpec, moe_layer: bool = False) -> tuple[float, float]:
    """(forward, backward) bytes per token of one layer's memory-bound operators before the / t split."""
    h, d = model.hidden, model.head_dim
    rope = 2 * BF16 * (model.heads + model.kv_heads) * d
    f = float(model.ffn)
    if moe_layer:
        f = model.experts_per_token * model.expert_ffn + model.shared_expert_ffn
    act_f, act_b = _activation_bytes(model, f)
    return 8 * h + rope + act_f + 12 * h, 12 * h + rope + act_b + 12 * h


def stage_s(job: JobSpec, tokens_per_rank: np.ndarray, stage: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of the stage's memory-bound operators for ``tokens_per_rank`` tokens on one
    GPU of the TP group."""
    fwd, bwd = per_token_s(job, stage)
    return tokens_per_rank * fwd, tokens_per_rank * bwd


def per_token_s(job: JobSpec, stage: int) -> tuple[float, float]:
    """Forward and backward seconds per token per rank of the stage's memory-bound operators."""
    dense, moe = stage_layers(job, stage) if job.model.is_moe else (job.stage_layers(stage), 0)
    fd, bd = layer_bytes(job.model)
    fwd, bwd = dense * fd, dense * bd
    if moe:
        fm, bm = layer_bytes(job.model, moe_layer=True)
        fwd, bwd = fwd + moe * fm, bwd + moe * bm
    per_token = 1.0 / (job.tp * job.gpu.hbm_bw_gbs * 1e9)
    return fwd * per_token, bwd * per_token
