"""The linear layers' GEMMs by shape, priced by math and HBM traffic (CostTerms.gemm_shapes; docs/cost_model.md
"GEMMs by shape").

Every linear layer y = x·W (W of K × N) of one GPU of a TP group of t, with sequence parallelism (the layer's
input is all-gathered over the TP group, so each GPU multiplies all T tokens of its rank): Megatron-Core's
column-parallel layers split N, its row-parallel layers split K:

===============================  ===================  ====================
GEMM                             N (outputs)          K (inputs)
===============================  ===================  ====================
QKV projection (column)          (a + 2g)·d / t       h
attention out (row)              h                    a·d / t
MLP up + gate (column, fused)    m·f / t              h
MLP down (row)                   h                    f / t
===============================  ===================  ====================

with m = 2 for SwiGLU (TransformerEngine's ``LayerNormMLP`` runs gate and up as one GEMM of 2f outputs) and 1
for GELU / squared ReLU. Forward: one GEMM of M = T rows (M × K by K × N). Backward: two, with their own
shapes: dgrad dX = dY·Wᵀ (M = T, N = K, K = N) and wgrad dW = Xᵀ·dY (M = K, N = N, K = T). A MoE layer's
router (N = E, K = h), its shared expert (as a dense MLP of f_s) and its routed experts: E / ep local experts
per GPU, each an MLP GEMM pair of f_e with M = ep·T·k / E rows (balanced routing, cost_models.moe).

Each GEMM takes 2·M·N·K / P + bytes / B seconds: its math at the achieved GEMM rate P (the calibration's
``gemm.peak_tflops``) plus moving its operands at the data sheet's HBM bandwidth B, bytes = 2·(M·K + K·N)
reads + 2·M·N writes (bf16), and for wgrad 4·K·N read and written again (Megatron's
``gradient_accumulation_fusion``, on by default, accumulates dW into the fp32 ``main_grad``). A sum, not the
roofline's max: the no-overlap bound of the roofline's two terms, and it keeps every GEMM's time affine in its
token count, which HyDra's work model (overhead + Σ work) and the lower bound's proof (docs/bound.md,
assumption C) need; at the sizes that dominate training (thousands of tokens) the traffic term is a few per
cent of the math and P, fitted end to end (cost_models/data/build_defaults.py), absorbs it. Not modelled: tile
and wave quantization (a problem's tile count against the SM count), split-K, and the epilogues' fused bias/activation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.cost_models.moe import stage_layers, tokens_per_expert
from dcpsim.cost_models.specs import JobSpec, ModelSpec

BF16 = 2.0
FP32 = 4.0
GATE_UP = {"swiglu": 2, "gelu": 1}  # matrices of the MLP's first GEMM (fused gate and up)


@dataclass(frozen=True)
class Gemm:
    """One GEMM shape of a layer on one GPU: N outputs, K inputs, ``count`` of them (local experts); its rows
    are the tokens (``expert`` False) or each routed expert's tokens."""

    name: str
    n: float
    k: float
    count: float = 1.0
    expert: bool = False


def _mlp(model: ModelSpec, f: float, t: int, prefix: str, count: float = 1.0, expert: bool = False) -> list[Gemm]:
    return [Gemm(f"{prefix}up_gate", GATE_UP[model.mlp] * f / t, model.hidden, count, expert),
            Gemm(f"{prefix}down", model.hidden, f / t, count, expert)]


def layer_gemms(job: JobSpec, moe_layer: bool = False) -> list[Gemm]:
    """The GEMM shapes of one layer (dense, or a MoE layer) on one GPU of the job's TP group."""
    m, t = job.model, job.tp
    h, d = m.hidden, m.head_dim
    out = [Gemm("qkv", (m.heads + 2 * m.kv_heads) * d / t, h), Gemm("attn_out", h, m.heads * d / t)]
    if not moe_layer:
        return out + _mlp(m, m.ffn, t, "mlp_")
    out.append(Gemm("router", m.experts / t, h))
    if m.shared_expert_ffn:
        out += _mlp(m, m.shared_expert_ffn, t, "shared_")
    return out + _mlp(m, m.expert_ffn, t, "expert_", count=m.experts / job.ep, expert=True)


def gemm_s(M: np.ndarray | float, N: float, K: np.ndarray | float, peak_tflops: float, hbm_gbs: float,
           c_bytes: float = BF16) -> np.ndarray:
    """Seconds of one M × K by K × N GEMM, math + traffic (``c_bytes`` per output element moved); 0 at an infinite
    rate (a calibration whose GEMMs are free, as the kernels-alone fits and the attention-alone rows use)."""
    if not np.isfinite(peak_tflops):
        return np.zeros(np.broadcast(M, K).shape)
    flops = 2.0 * M * N * K
    nbytes = BF16 * (M * K + K * N) + c_bytes * M * N
    return np.asarray(flops / (peak_tflops * 1e12) + nbytes / (hbm_gbs * 1e9), dtype=np.float64)


def fwd_bwd_s(job: JobSpec, gemms: list[Gemm], tokens: np.ndarray, peak_tflops: float,
              expert_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of ``gemms`` for ``tokens`` rows (per GPU); ``expert_rows``: the rows of
    each routed expert's GEMMs."""
    bw = job.gpu.hbm_bw_gbs
    T = np.asarray(tokens, dtype=np.float64)
    fwd = np.zeros_like(T)
    bwd = np.zeros_like(T)
    for g in gemms:
        M = expert_rows if g.expert and expert_rows is not None else T
        fwd = fwd + g.count * gemm_s(M, g.n, g.k, peak_tflops, bw)
        dgrad = gemm_s(M, g.k, g.n, peak_tflops, bw)
        wgrad = gemm_s(g.k, g.n, M, peak_tflops, bw, c_bytes=2.0 * FP32)
        bwd = bwd + g.count * (dgrad + wgrad)
    return fwd, bwd


def stage_sum_s(job: JobSpec, tokens: np.ndarray, stage: int, peak_tflops: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of every linear layer of pipeline stage ``stage`` for ``tokens`` per GPU,
    summed GEMM by GEMM: the plain definition :func:`stage_s` is tested against."""
    T = np.asarray(tokens, dtype=np.float64)
    n_dense, n_moe = stage_layers(job, stage) if job.model.is_moe else (job.stage_layers(stage), 0)
    fwd, bwd = np.zeros_like(T), np.zeros_like(T)
    if n_dense:
        f, b = fwd_bwd_s(job, layer_gemms(job), T, peak_tflops)
        fwd, bwd = n_dense * f, n_dense * b
    if n_moe:
        f, b = fwd_bwd_s(job, layer_gemms(job, moe_layer=True), T, peak_tflops, tokens_per_expert(job, T))
        fwd, bwd = fwd + n_moe * f, bwd + n_moe * b
    return fwd, bwd


def stage_s(job: JobSpec, tokens: np.ndarray, stage: int, peak_tflops: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stage_sum_s`, evaluated as the affine function of tokens it is: every GEMM's math and traffic
    are affine in its rows (and a routed expert's rows are proportional to the tokens), so the sum is taken
    at 0 and 1 token and applied to ``tokens`` in two array operations. Measured with
    ``experiments/bench/sim.py --profile h100-512-256k:static-cp`` (one simulated iteration, the lower bound's
    pricing the most of it): the GEMM-by-GEMM sum took 0.11 of 0.41 s, this 0.01 of 0.16–0.26 s (3 runs);
    tests/cost_models/test_gemm.py holds it to the plain sum."""
    at = stage_sum_s(job, np.array([0.0, 1.0]), stage, peak_tflops)
    T = np.asarray(tokens, dtype=np.float64)
    return at[0][0] + (at[0][1] - at[0][0]) * T, at[1][0] + (at[1][1] - at[1][0]) * T


def moe_mlp_fwd_s(job: JobSpec, tokens: np.ndarray, peak_tflops: float) -> np.ndarray:
    """Forward seconds of one MoE layer's MLP part (router, shared expert, routed experts): what
    ``job.moe_recompute`` runs again in the backward."""
    T = np.asarray(tokens, dtype=np.float64)
    mlp = [g for g in layer_gemms(job, moe_layer=True) if g.name not in ("qkv", "attn_out")]
    return fwd_bwd_s(job, mlp, T, peak_tflops, tokens_per_expert(job, T))[0]
