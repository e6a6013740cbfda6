"""The ends of the pipeline: the input embedding (first stage), the LM head and the loss (last stage).

Per microbatch, for one GPU of a rank holding ``tpr`` tokens (Σ L / c of its CP group), TP degree t,
vocabulary V, hidden h, HBM bandwidth B (GPUSpec.hbm_bw_gbs):

* LM head (Megatron ``ColumnParallelLinear`` over the vocabulary): 2·h·V/t FLOPs per token forward, on the
  GEMM curve at ``tpr`` tokens; backward 2x (data and weight gradients), as for every GEMM.
* Vocab-parallel cross-entropy in fp32 (Megatron-LM ``core/tensor_parallel/cross_entropy.py``,
  ``_VocabParallelCrossEntropy``): memory-bound passes over the tpr·V/t logits, counted from that source:
  forward cast bf16→fp32 (2 B read + 4 B write), max (4), subtract the max in place (4 + 4), exp in place
  (4 + 4), sum (4), divide by the sum in place to keep the softmax for backward (4 + 4) = 38 B per logit;
  backward: scale the saved softmax by the incoming gradient in place (4 + 4) and the cast back to bf16 for
  the head's backward (4 + 2) = 14 B per logit; time = bytes / B.
* Input embedding (``VocabParallelEmbedding``): each TP rank gathers its vocabulary shard's rows and writes a
  full [tpr, h] bf16 output (2·h B read + 2·h B write per token); backward: the token gradients are read
  (2·h) and scatter-added into the weight gradient's rows (2·h read + 2·h write) per token; time = bytes / B.
* TP communication of the ends (gated by CostTerms.tp_comm as well): with sequence parallelism the
  embedding's output is reduce-scattered over the TP group (backward: all-gathered) and the LM head's input
  all-gathered (backward: reduce-scattered), tpr·h·2 bytes each; the loss all-reduces three fp32 values per
  token over the TP group (max, target logit, Σ exp) in the forward.

Memory: the loss keeps the fp32 softmax, tpr·V/t·4 bytes, from the forward of a microbatch to its backward; under
1F1B the last stage runs each backward right after its forward, so only one microbatch's logits are alive at a
time (cost_models.memory adds them once, not per in-flight microbatch).

Not modelled: the final RMSNorm, the dense accumulation of the embedding's weight gradient into the fp32 main
gradient (once per microbatch, V/t·h elements), tied embeddings, multi-token prediction heads.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.calibration import Calibration
from dcpsim.cost_models.specs import JobSpec

BF16_BYTES = 2.0
FP32_BYTES = 4.0
LOSS_FWD_BYTES_PER_LOGIT = 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4  # 38, module docstring
LOSS_BWD_BYTES_PER_LOGIT = 4 + 4 + 4 + 2  # 14
EMBED_FWD_BYTES_PER_HIDDEN = 2 * BF16_BYTES  # read the row, write the output
EMBED_BWD_BYTES_PER_HIDDEN = 3 * BF16_BYTES  # read the gradient, read-modify-write the weight-gradient row
LOSS_ALL_REDUCES = 3  # max, target logit, Σ exp (fp32 per token)


def lm_head_fwd_flops(job: JobSpec, tpr: np.ndarray) -> np.ndarray:
    """Forward FLOPs of the LM head on one GPU for ``tpr`` tokens: 2·h·V/t per token."""
    m = job.model
    flops = np.asarray(tpr, dtype=np.float64) * 2.0 * m.hidden * m.vocab
    return flops / job.tp if job.tp != 1 else flops  # (x / 1 is x)


def _hbm_s(job: JobSpec, nbytes: np.ndarray) -> np.ndarray:
    return np.asarray(nbytes, dtype=np.float64) / (job.gpu.hbm_bw_gbs * 1e9)


def head_compute_s(job: JobSpec, cal: Calibration, tpr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of the LM head GEMM and the loss on one GPU of the last stage."""
    tpr = np.asarray(tpr, dtype=np.float64)
    gemm_f = cal.gemm.seconds(lm_head_fwd_flops(job, tpr), tpr)
    logits = tpr * job.model.vocab
    if job.tp != 1:  # (x / 1 is x)
        logits = logits / job.tp
    loss_f = _hbm_s(job, logits * LOSS_FWD_BYTES_PER_LOGIT)
    loss_b = _hbm_s(job, logits * LOSS_BWD_BYTES_PER_LOGIT)
    return gemm_f + loss_f, 2.0 * gemm_f + loss_b


def embedding_compute_s(job: JobSpec, tpr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of the embedding lookup and its gradient on one GPU of the first stage."""
    per_token = np.asarray(tpr, dtype=np.float64) * job.model.hidden
    return _hbm_s(job, per_token * EMBED_FWD_BYTES_PER_HIDDEN), _hbm_s(job, per_token * EMBED_BWD_BYTES_PER_HIDDEN)


def ends_tp_comm_s(job: JobSpec, cal: Calibration, tpr: np.ndarray, first: bool,
                   last: bool) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) TP communication of the embedding (``first``) and the LM head and loss (``last``)."""
    tpr = np.asarray(tpr, dtype=np.float64)
    zero = np.zeros_like(tpr)
    if job.tp == 1 or not (first or last):
        return zero, zero
    t = job.tp
    act = tpr * job.model.hidden * BF16_BYTES
    ag = cal.link("all_gather", "nvlink").seconds("all_gather", act, t)
    rs = cal.link("reduce_scatter", "nvlink").seconds("reduce_scatter", act, t)
    ar = cal.link("all_reduce", "nvlink").seconds("all_reduce", tpr * FP32_BYTES, t)
    fwd = (rs if first else zero) + (ag + LOSS_ALL_REDUCES * ar if last else zero)
    bwd = (ag if first else zero) + (rs if last else zero)
    return (1.0 - job.tp_comm_overlap) * fwd, (1.0 - job.tp_comm_overlap) * bwd


def logits_bytes(job: JobSpec, tokens: np.ndarray) -> np.ndarray:
    """fp32 softmax the loss keeps for one microbatch of ``tokens`` tokens per rank, per GPU: tokens·V/t·4."""
    return np.asarray(tokens, dtype=np.float64) * job.model.vocab / job.tp * FP32_BYTES
