"""Memory per rank (one GPU of a TP group), in bytes, as Megatron-LM keeps it.

* Model states, Megatron's mixed precision with the distributed optimizer (docs/distrib_optimizer.md of
  Megatron-LM, its bytes-per-parameter table): bf16 weights (2 B/param) and the gradient buffer on every rank
  — fp32 (4 B/param) where gradients are accumulated and reduced in fp32 (Megatron-LM's behaviour with
  --bf16), bf16 (2 B/param) with ``grad_reduce_in_fp32`` off (NeMo's performance recipes) — and the
  optimizer shard over the W ranks of the pool: fp32 master weights and two Adam moments, 12 B/param, plus
  an fp32 copy of the gradient shard with bf16 gradients, 16 B/param: 6 + 12/W or 4 + 16/W bytes per
  parameter (the table's "bf16 param, fp32 grads" and "fp16/bf16 param, fp16/bf16 grads" rows).
  With bf16 gradients the optimizer makes an fp32 copy of its gradient shard at the step
  (DistributedOptimizer ``_copy_model_grads_to_main_grads``: ``.float()``), freed with the gradients
  (``zero_grad(set_to_none=True)``), when no activations are alive: 4/W bytes per parameter, counted as
  the larger of it and the activations, not on top.
* Activations with TP + sequence parallelism: 34·s·h/t bytes per layer for s tokens (Korthikanti et al.
  2022, "Reducing Activation Recomputation in Large Transformer Models", Table 2, selective recompute; the
  a·s² terms are absent because the fused attention kernels never store the scores, so no recompute keeps
  the same 34·s·h/t); with full recompute a checkpointed layer keeps its input only, 2·s·h/t
  (cost_models.recompute says which layers). With CostTerms.activation_shapes the same tensors are counted
  from the model's shapes (:func:`saved_bytes_per_token_layer`): Korthikanti's 34·h for GPT is 32·h of bf16
  tensors (norm inputs and outputs 8h, Q/K/V 6h, attention output 2h, MLP 16h) and 2·h of dropout masks;
  for a GQA model Q, K, V are 2(a + 2g)·d, a SwiGLU MLP keeps its 2f gate/up output and f activation
  (6f bytes), and no dropout (the Llama/Nemotron recipes set it to 0) keeps no masks: 34·h for Llama 3 8B,
  33.5·h for 70B, 31.75·h for 405B.
* In flight: under 1F1B stage s holds the activations of up to p − s microbatches; interleaved with V model
  chunks (Megatron's warm-up of 2(p − s − 1) + (V − 1)·p chunk forwards, plus the steady state's one), up to
  (2(p − s − 1) + (V − 1)·p + 1) chunk microbatches of 1/V of the stage's layers each
  (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving); with an
  uneven split (Megatron's account_for_*_in_pipeline_split, num_layers_in_first/last_pipeline_stage:
  JobSpec.split) each chunk holds its own share of the stage's layers, and :func:`in_flight` weighs them.

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
  backward, (a/t) · 4 bytes per token (fp32), on top of the 34·h/t of Korthikanti et al. (dropped by
  selective recompute, which re-runs the kernel).
* ``recompute``: the job's recompute setting (off: as none); under full recompute the layers one
  recompute rebuilds at once are transient (largest microbatch, once).

The token budget M is derived with all of them; the simulator's reported peak is computed from the plan's
actual in-flight tokens, its largest microbatch and whether that microbatch uses CP (sim.simulate), so a
plan that ignores M shows up as not fitting. :func:`memory_breakdown` lists the parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.cost_models import recompute as rc
from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.cost_models.head import logits_bytes
from dcpsim.cost_models.moe import moe_extra_activation_bytes, stage_expert_params
from dcpsim.cost_models.specs import JobSpec
from dcpsim.cost_models.terms import CostTerms

ACT_BYTES_PER_TOKEN_HIDDEN = 34.0
CHECKPOINT_BYTES_PER_TOKEN_HIDDEN = 2.0  # a full-recompute checkpoint: the layer's bf16 input
BF16_BYTES, FP32_BYTES = 2.0, 4.0
WEIGHT_BYTES_PER_PARAM = BF16_BYTES
MASTER_AND_ADAM_BYTES_PER_PARAM = 12.0  # fp32 master weights and two fp32 Adam moments (sharded over W)
RING_BUFFERS = 4  # K,V and dK,dV chunks, current and next step, in the ring's backward (module docstring)


def stage_params(job: JobSpec, stage: int) -> int:
    """Parameters held by one stage: its layers, the input embedding on the first, the LM head on the last
    (tied embeddings with one stage: one copy; with several, the last stage keeps its own copy, as Megatron
    does). A MoE stage counts all its experts (model_state_bytes shards them by EP)."""
    m = job.model
    nl = job.stage_layers(stage)
    if m.is_moe:
        first = job.stage_first_layer(stage)
        p = sum(m.layer_params(i) for i in range(first, first + nl))
    else:
        p = nl * m.params_per_layer
    if stage == 0:
        p += m.vocab * m.hidden
    if stage == job.pp - 1 and not (m.tied_embeddings and job.pp == 1):
        p += m.vocab * m.hidden
    return p


def state_bytes_per_param(job: JobSpec) -> tuple[float, float, float]:
    """(weights, gradient buffer, optimizer shard before the / W split) bytes per parameter (module docstring):
    (2, 4, 12) with fp32 gradients, (2, 2, 12) with bf16 ones (and :func:`step_copy_bytes` at the step)."""
    if job.grad_reduce_in_fp32:
        return WEIGHT_BYTES_PER_PARAM, FP32_BYTES, MASTER_AND_ADAM_BYTES_PER_PARAM
    return WEIGHT_BYTES_PER_PARAM, BF16_BYTES, MASTER_AND_ADAM_BYTES_PER_PARAM


def step_copy_bytes(job: JobSpec, stage: int) -> float:
    """The fp32 copy of the gradient shard the optimizer step makes with bf16 gradients (module docstring), on
    one GPU of ``stage``; 0 with fp32 gradients (the buffer is the copy)."""
    if job.grad_reduce_in_fp32:
        return 0.0
    return model_state_parts(job, stage)[2] * FP32_BYTES / MASTER_AND_ADAM_BYTES_PER_PARAM


def model_state_parts(job: JobSpec, stage: int) -> tuple[float, float, float]:
    """Weights, gradients and optimizer shard bytes on one GPU of ``stage``. Routed experts are split over the
    ETP · ep GPUs of an expert-model-parallel group (weights and gradients / (ETP·ep)); their optimizer states
    over the t·W / (ETP·ep) ranks of expert data parallelism, which is 1 / (t·W) per parameter as for the dense
    part."""
    w, g, o = state_bytes_per_param(job)
    experts = stage_expert_params(job, stage) if job.model.is_moe else 0
    dense = (stage_params(job, stage) - experts) / job.tp
    local = dense + experts / job.expert_tp / job.ep
    return local * w, local * g, (dense + experts / job.tp) * o / job.pool


def model_state_bytes(job: JobSpec, stage: int) -> float:
    """Weights, gradients and optimizer states on one GPU of ``stage``: :func:`model_state_parts` summed, as
    (w + g) + o / W bytes per parameter (the first version's order of operations)."""
    w, g, o = state_bytes_per_param(job)
    if job.model.is_moe:
        experts = stage_expert_params(job, stage)
        dense = stage_params(job, stage) - experts
        if job.expert_tp == job.tp:
            return dense / job.tp * (w + g + o / job.pool) + experts / job.tp * ((w + g) / job.ep + o / job.pool)
        return (dense / job.tp * (w + g + o / job.pool)
                + experts * ((w + g) / (job.expert_tp * job.ep) + o / (job.tp * job.pool)))
    return stage_params(job, stage) / job.tp * (w + g + o / job.pool)


def _recompute(job: JobSpec, terms: CostTerms) -> JobSpec:
    """The job as the memory model reads it: its recompute setting, or none with CostTerms.recompute off."""
    return job if terms.recompute or job.recompute == "none" else job.with_(recompute="none", recompute_layers=None)


def saved_bytes_per_token_layer(model) -> float:
    """Bytes of the tensors one dense layer saves for its backward per token, before the / t split (module
    docstring): two norms' inputs and outputs, Q, K, V, the attention output, the MLP's up (and gate) output
    and its activation's output; no dropout masks."""
    h, d, f = model.hidden, model.head_dim, model.ffn
    attention = 4 * h + 2 * (model.heads + 2 * model.kv_heads) * d + 2 * model.heads * d
    up = 2 * f if model.mlp == "swiglu" else f
    mlp = 4 * h + 2 * up + 2 * f
    return float(attention + mlp)


def layer_activation_bytes_per_token(job: JobSpec, terms: CostTerms | None = None) -> float:
    """Bytes one token keeps in one whole (not checkpointed) dense layer on one GPU: 34·h/t (or the shapes'
    count, CostTerms.activation_shapes), plus the fused attention's log-sum-exp with CostTerms.memory_extra
    unless selective recompute re-runs the kernel."""
    terms = terms or CostTerms()
    if terms.activation_shapes and not job.model.is_moe:
        per_layer = saved_bytes_per_token_layer(job.model) / job.tp
    else:
        per_layer = ACT_BYTES_PER_TOKEN_HIDDEN * job.model.hidden / job.tp
    if terms.memory_extra and _recompute(job, terms).recompute != "selective":
        per_layer = per_layer + job.heads_per_rank * FP32_BYTES  # FlashAttention's log-sum-exp
    return per_layer


def activation_bytes_per_token(job: JobSpec, terms: CostTerms | None = None, stage: int = 0) -> float:
    """Activation bytes one token of a microbatch keeps on one GPU of a stage (all its layers, every model
    chunk): whole layers at :func:`layer_activation_bytes_per_token`, full-recompute checkpoints at 2·h/t.
    MoE layers keep their experts' inputs and intermediates instead of a dense MLP's (cost_models.moe)."""
    terms = terms or CostTerms()
    j = _recompute(job, terms)
    whole = j.stage_layers(stage) - rc.checkpointed_layers(j, stage)
    out = whole * layer_activation_bytes_per_token(j, terms)
    out += rc.checkpoints(j, stage) * CHECKPOINT_BYTES_PER_TOKEN_HIDDEN * j.model.hidden / j.tp
    if job.model.is_moe:
        return out + moe_extra_activation_bytes(job, stage)
    return out


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
    j = _recompute(job, terms)
    if rc.rebuilt_layers(j, stage):
        out = out + largest * rc.rebuilt_layers(j, stage) * layer_activation_bytes_per_token(j, terms)
    return out


def in_flight(job: JobSpec, stage: int) -> float:
    """Microbatches (in whole-stage equivalents) whose activations stage ``stage`` holds at once: p − s under
    1F1B; (2(p − s − 1) + (V − 1)·p + 1) / V interleaved (module docstring).

    With an uneven split (JobSpec.split) a chunk's forward holds its share a_c of the stage's layers
    (JobSpec.chunk_shares), and the largest sum over the steady state is taken: with microbatch groups of p
    (Megatron's default), forward k runs chunk c(k) = (k mod p·V) // p and backward k frees chunk V − 1 − c(k);
    after warm-up w = 2(p − s − 1) + (V − 1)·p and forward w + i, the stage holds
    Σ_{k ≤ w + i} a_{c(k)} − Σ_{k < i} a_{V − 1 − c(k)}, periodic in i with period p·V (both sums gain p·Σ a
    per period), so i = 0 … p·V − 1 give its maximum."""
    p, v = job.pp, job.vpp
    if v == 1:
        return float(p - stage)
    if job.even_split:
        return (2 * (p - stage - 1) + (v - 1) * p + 1) / v
    a = job.chunk_shares(stage)
    w = 2 * (p - stage - 1) + (v - 1) * p
    held = sum(a[(k % (p * v)) // p] for k in range(w + 1))
    best = held
    for i in range(1, p * v):
        held += a[((w + i) % (p * v)) // p] - a[v - 1 - ((i - 1) % (p * v)) // p]
        best = max(best, held)
    return best


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
        if free <= step_copy_bytes(job, stage):
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
    states = model_state_bytes(job, stage) + job.memory_reserve_gb * 1e9
    act = activation_bytes_per_token(job, terms, stage) * tif
    transient = transient_bytes(job, stage, largest, cp, terms)
    step = step_copy_bytes(job, stage)
    if not step:  # (fp32 gradients: the sum in the first version's order)
        return states + act + transient
    return states + np.maximum(act + transient, step)


@dataclass(frozen=True)
class MemoryBreakdown:
    """The parts of one GPU's peak (bytes): what ``dcpsim cost --memory`` prints."""

    stage: int
    weights: float
    gradients: float
    optimizer: float  # this GPU's shard of master weights, Adam moments (and fp32 gradient copy)
    activations: float  # saved for the backward by the in-flight microbatches (recompute mode applied)
    transient: float  # one microbatch's logits, CP and attention buffers, recompute rebuild
    reserve: float  # CUDA context, NCCL buffers, fragmentation (job.memory_reserve_gb)
    step_copy: float  # the optimizer step's fp32 gradient-shard copy (bf16 gradients), not alive with activations
    recompute: str  # the recompute mode the activations are for

    @property
    def total(self) -> float:
        states = self.weights + self.gradients + self.optimizer + self.reserve
        return states + max(self.activations + self.transient, self.step_copy)

    def to_dict(self) -> dict:
        return {"stage": self.stage, "weights_gb": self.weights / 1e9, "gradients_gb": self.gradients / 1e9,
                "optimizer_gb": self.optimizer / 1e9, "activations_gb": self.activations / 1e9,
                "transient_gb": self.transient / 1e9, "reserve_gb": self.reserve / 1e9,
                "step_copy_gb": self.step_copy / 1e9, "total_gb": self.total / 1e9, "recompute": self.recompute}


def memory_breakdown(job: JobSpec, stage: int, microbatch_tokens: float, cp: bool = False,
                     terms: CostTerms | None = None) -> MemoryBreakdown:
    """One GPU's peak at ``stage`` when every microbatch puts ``microbatch_tokens`` tokens on a rank (uniform
    microbatches, the schedule's full warm-up: :func:`in_flight`) and uses CP (``cp``) or not; its total is
    :func:`peak_memory_bytes` of that plan."""
    terms = terms or CostTerms()
    w, g, o = model_state_parts(job, stage)
    act = activation_bytes_per_token(job, terms, stage) * in_flight(job, stage) * microbatch_tokens
    tr = float(transient_bytes(job, stage, microbatch_tokens, microbatch_tokens if cp else 0.0, terms))
    return MemoryBreakdown(stage, w, g, o, act, tr, job.memory_reserve_gb * 1e9, step_copy_bytes(job, stage),
                           _recompute(job, terms).recompute)
