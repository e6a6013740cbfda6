"""Memory per rank (one GPU of a TP group), in bytes (DESIGN §5).

* Model states, Megatron mixed precision with the distributed optimizer: bf16 weights (2 B/param) and fp32
  main gradients (4 B/param) on every rank, fp32 master weights and two Adam moments (12 B/param) sharded over
  the W ranks of the pool: (6 + 12/W) bytes per parameter of the rank's shard (Megatron-LM distributed
  optimizer docs; 18 B/param unsharded).
* Activations with selective recomputation and TP + sequence parallelism: 34·s·h/t bytes per layer for s
  tokens (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models").
* Under non-interleaved 1F1B, stage s holds the activations of up to p − s microbatches at once.

Terms added since the first version, each gated by a CostTerms switch (off: the first version's numbers):

* ``lm_head``: the loss's fp32 softmax on the last stage, tokens·V/t·4 bytes (cost_models.head), alive from a
  microbatch's forward to its backward; the last stage runs them back to back, so it counts once, for the
  largest microbatch, not per in-flight microbatch.
* ``memory_extra``, transient per layer (counted once, for the largest microbatch of the rank):
  - CP receive buffers of the ring (TransformerEngine ``AttnFuncWithCPAndKVP2P``): the forward double-buffers
    the K, V chunk (current and next step), the backward K, V and dK, dV (current and next): at most
    4 · 2 · (g/t) · d · 2 bytes per token of the rank, when its group has CP degree > 1 (Ulysses' all-to-all
    buffers of Q, K, V, (a + 2g)/t · d · 2 bytes per token, are smaller for g ≤ a/2 and bounded by it);
  - attention workspace: FlashAttention-2/3's backward accumulates dQ in fp32 (``dq_accum``,
    flash_api.cpp), (a/t) · d · 4 bytes per token;
  and saved per layer per in-flight microbatch: the softmax log-sum-exp FlashAttention keeps for the
  backward, (a/t) · 4 bytes per token (fp32), on top of the 34·h/t of Korthikanti et al.

The token budget M is derived with all of them; the simulator's reported peak is computed from the plan's
actual in-flight tokens, its largest microbatch and whether that microbatch uses CP (sim.simulate), so a
plan that ignores M shows up as not fitting.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.cost_models.head import logits_bytes
from dcpsim.cost_models.moe import moe_extra_activation_bytes, stage_expert_params
from dcpsim.cost_models.specs import JobSpec
from dcpsim.cost_models.terms import CostTerms

ACT_BYTES_PER_TOKEN_HIDDEN = 34.0
STATE_BYTES_PER_PARAM = 6.0
SHARDED_STATE_BYTES_PER_PARAM = 12.0
BF16_BYTES, FP32_BYTES = 2.0, 4.0
RING_BUFFERS = 4  # K,V and dK,dV chunks, current and next step, in the ring's backward (module docstring)


def stage_params(job: JobSpec, stage: int) -> int:
    """Parameters held by one stage: its layers, the input embedding on the first, the LM head on the last
    (tied embeddings with one stage: one copy; with several, the last stage keeps its own copy, as Megatron
    does). A MoE stage counts all its experts (model_state_bytes shards them by EP)."""
    m = job.model
    if m.is_moe:
        nl = job.layers_per_stage
        p = sum(m.layer_params(i) for i in range(stage * nl, (stage + 1) * nl))
    else:
        p = job.layers_per_stage * m.params_per_layer
    if stage == 0:
        p += m.vocab * m.hidden
    if stage == job.pp - 1 and not (m.tied_embeddings and job.pp == 1):
        p += m.vocab * m.hidden
    return p


def model_state_bytes(job: JobSpec, stage: int) -> float:
    """Weights, gradients and optimizer states on one GPU of ``stage``. Routed experts are split over the ep
    ranks of an EP group (weights and gradients / (t·ep)); their optimizer states over the pool / ep ranks
    of expert data parallelism, which is 12 B / (t·W) per parameter as for the dense part."""
    if job.model.is_moe:
        experts = stage_expert_params(job, stage)
        dense = stage_params(job, stage) - experts
        return (dense / job.tp * (STATE_BYTES_PER_PARAM + SHARDED_STATE_BYTES_PER_PARAM / job.pool)
                + experts / job.tp * (STATE_BYTES_PER_PARAM / job.ep + SHARDED_STATE_BYTES_PER_PARAM / job.pool))
    per_gpu = stage_params(job, stage) / job.tp
    return per_gpu * (STATE_BYTES_PER_PARAM + SHARDED_STATE_BYTES_PER_PARAM / job.pool)


def activation_bytes_per_token(job: JobSpec, terms: CostTerms | None = None, stage: int = 0) -> float:
    """Activation bytes one token of a microbatch keeps on one GPU of a stage (all its layers). MoE layers
    keep their experts' inputs and intermediates instead of a dense MLP's (cost_models.moe)."""
    per_layer = ACT_BYTES_PER_TOKEN_HIDDEN * job.model.hidden / job.tp
    if (terms or CostTerms()).memory_extra:
        per_layer = per_layer + job.heads_per_rank * FP32_BYTES  # FlashAttention's log-sum-exp
    if job.model.is_moe:
        return per_layer * job.layers_per_stage + moe_extra_activation_bytes(job, stage)
    return per_layer * job.layers_per_stage


def transient_bytes(job: JobSpec, stage: int, largest_tokens: np.ndarray | float,
                    cp_tokens: np.ndarray | float, terms: CostTerms | None = None) -> np.ndarray:
    """Bytes alive only during one microbatch (module docstring) on one GPU of ``stage``, for a rank whose
    largest microbatch holds ``largest_tokens`` tokens and whose largest CP (degree > 1) one ``cp_tokens``."""
    terms = terms or CostTerms()
    largest = np.asarray(largest_tokens, dtype=np.float64)
    out = np.zeros_like(largest)
    if terms.lm_head and stage == job.pp - 1:
        out = out + logits_bytes(job, largest)
    if terms.memory_extra:
        d = job.model.head_dim
        out = out + largest * job.heads_per_rank * d * FP32_BYTES
        out = out + np.asarray(cp_tokens, dtype=np.float64) * RING_BUFFERS * 2 * job.kv_heads_per_rank * d * BF16_BYTES
    return out


def in_flight(job: JobSpec, stage: int) -> int:
    """Microbatches whose activations stage ``stage`` holds at once under 1F1B."""
    return job.pp - stage


def memory_budget_tokens(job: JobSpec, terms: CostTerms | None = None) -> int:
    """Per-rank token budget M of one microbatch: the tokens whose activations, times the in-flight
    microbatches, plus the transient buffers of one microbatch (CP buffers counted as if it used CP), fit
    beside the model states and the reserve on the tightest stage."""
    if job.max_tokens_per_rank is not None:
        return job.max_tokens_per_rank
    cap = job.gpu.hbm_gb * 1e9 - job.memory_reserve_gb * 1e9
    best = None
    for stage in range(job.pp):
        free = cap - model_state_bytes(job, stage)
        if free <= 0:
            raise InfeasibleError(
                f"model states of stage {stage} need {model_state_bytes(job, stage) / 1e9:.1f} GB per GPU, more "
                f"than the {cap / 1e9:.1f} GB left of {job.gpu.name}'s {job.gpu.hbm_gb:g} GB after the "
                f"{job.memory_reserve_gb:g} GB reserve; raise tp, pp or pool")
        per_token = (activation_bytes_per_token(job, terms, stage) * in_flight(job, stage)
                     + float(transient_bytes(job, stage, 1.0, 1.0, terms)))
        m = int(free // per_token)
        best = m if best is None else min(best, m)
    if not best or best < 1:
        raise InfeasibleError(f"no room for activations on {job.gpu.name}: raise tp, pp or pool")
    return best


def peak_memory_bytes(job: JobSpec, stage: int, tokens_in_flight: np.ndarray,
                      largest_tokens: np.ndarray | None = None, cp_tokens: np.ndarray | None = None,
                      terms: CostTerms | None = None) -> np.ndarray:
    """Peak bytes per GPU given each rank's largest sum of in-flight microbatch tokens, its largest
    microbatch's tokens and its largest CP microbatch's tokens (both default to ``tokens_in_flight``, an
    upper bound)."""
    tif = np.asarray(tokens_in_flight, dtype=np.float64)
    largest = tif if largest_tokens is None else largest_tokens
    cp = largest if cp_tokens is None else cp_tokens
    return (model_state_bytes(job, stage) + job.memory_reserve_gb * 1e9
            + activation_bytes_per_token(job, terms, stage) * tif + transient_bytes(job, stage, largest, cp, terms))
