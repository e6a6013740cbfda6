"""Memory per rank (one GPU of a TP group), in bytes (DESIGN §5).

* Model states, Megatron mixed precision with the distributed optimizer: bf16 weights (2 B/param) and fp32
  main gradients (4 B/param) on every rank, fp32 master weights and two Adam moments (12 B/param) sharded over
  the W ranks of the pool: (6 + 12/W) bytes per parameter of the rank's shard (Megatron-LM distributed
  optimizer docs; 18 B/param unsharded).
* Activations with selective recomputation and TP + sequence parallelism: 34·s·h/t bytes per layer for s
  tokens (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models").
* Under non-interleaved 1F1B, stage s holds the activations of up to p − s microbatches at once.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models.errors import InfeasibleError
from dcpsim.cost_models.specs import JobSpec

ACT_BYTES_PER_TOKEN_HIDDEN = 34.0
STATE_BYTES_PER_PARAM = 6.0
SHARDED_STATE_BYTES_PER_PARAM = 12.0


def stage_params(job: JobSpec, stage: int) -> int:
    """Parameters held by one stage: its layers, the input embedding on the first, the LM head on the last."""
    m = job.model
    p = job.layers_per_stage * m.params_per_layer
    if stage == 0:
        p += m.vocab * m.hidden
    if stage == job.pp - 1:
        p += m.vocab * m.hidden
    return p


def model_state_bytes(job: JobSpec, stage: int) -> float:
    """Weights, gradients and optimizer states on one GPU of ``stage``."""
    per_gpu = stage_params(job, stage) / job.tp
    return per_gpu * (STATE_BYTES_PER_PARAM + SHARDED_STATE_BYTES_PER_PARAM / job.pool)


def activation_bytes_per_token(job: JobSpec) -> float:
    """Activation bytes one token of a microbatch keeps on one GPU of a stage (all its layers)."""
    return ACT_BYTES_PER_TOKEN_HIDDEN * job.model.hidden / job.tp * job.layers_per_stage


def in_flight(job: JobSpec, stage: int) -> int:
    """Microbatches whose activations stage ``stage`` holds at once under 1F1B."""
    return job.pp - stage


def memory_budget_tokens(job: JobSpec) -> int:
    """Per-rank token budget M of one microbatch: the tokens whose activations, times the in-flight
    microbatches, fit beside the model states and the reserve on the tightest stage."""
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
        m = int(free // (activation_bytes_per_token(job) * in_flight(job, stage)))
        best = m if best is None else min(best, m)
    if not best or best < 1:
        raise InfeasibleError(f"no room for activations on {job.gpu.name}: raise tp, pp or pool")
    return best


def peak_memory_bytes(job: JobSpec, stage: int, tokens_in_flight: np.ndarray) -> np.ndarray:
    """Peak bytes per GPU given each rank's largest sum of in-flight microbatch tokens."""
    return (model_state_bytes(job, stage) + job.memory_reserve_gb * 1e9
            + activation_bytes_per_token(job) * np.asarray(tokens_in_flight, dtype=np.float64))
