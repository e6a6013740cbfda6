"""Activation recompute as Megatron-LM does it: which layers keep what, and what the backward re-runs.

Megatron-LM's flags (megatron/training/arguments.py; megatron/core/transformer/transformer_block.py,
``_checkpointed_forward``):

* ``--recompute-granularity selective`` recomputes the core attention (``recompute_modules`` default
  ``["core_attn"]``): the backward re-runs the attention forward; what the checkpoint drops is the fused
  kernel's own saved state (its output copy and softmax log-sum-exp), the inputs Q, K, V stay.
* ``--recompute-granularity full`` checkpoints whole layers: a checkpointed layer keeps only its input
  (s·h/t bf16 values per token with sequence parallelism), and the backward re-runs its forward.
  ``--recompute-method uniform`` splits a model chunk's layers into groups of ``--recompute-num-layers`` and
  checkpoints each group (every layer re-runs; a group's activations are rebuilt at once during its
  backward); ``block`` checkpoints the first ``--recompute-num-layers`` layers of each model chunk one by one
  and keeps the rest whole.
* No flag (Megatron-LM's default): nothing is recomputed.

Time (cost_models.analytic): selective adds the attention forward to the backward; full adds the recomputed
share of the layers' forward (compute, fixed costs, TP and CP communication) to the backward.
"""

from __future__ import annotations

from dcpsim.cost_models.specs import JobSpec


def num_layers(job: JobSpec) -> int:
    """``--recompute-num-layers`` with full recompute (Megatron's usual 1 when unset)."""
    return job.recompute_layers or 1


def _chunk_checkpointed(job: JobSpec, n: int) -> int:
    """Layers of a model chunk of ``n`` layers that keep only their input (full recompute)."""
    return n if job.recompute_method == "uniform" else min(num_layers(job), n)


def checkpointed_layers(job: JobSpec, stage: int = 0) -> int:
    """Layers of pipeline rank ``stage`` (all its model chunks; JobSpec.split) that keep only their input under
    full recompute; 0 otherwise. Megatron checkpoints inside each model chunk (each chunk is a
    TransformerBlock: ``_checkpointed_forward`` walks that block's layers)."""
    if job.recompute != "full":
        return 0
    return sum(_chunk_checkpointed(job, n) for n in job.split[stage])


def checkpoints(job: JobSpec, stage: int = 0) -> int:
    """Tensors (one layer input each) rank ``stage``'s chunks keep for their checkpointed layers: per chunk one
    per group of ``num_layers`` with the uniform method, one per layer with block."""
    if job.recompute != "full":
        return 0
    if job.recompute_method == "uniform":
        k = num_layers(job)
        return sum(-(-n // k) for n in job.split[stage])
    return checkpointed_layers(job, stage)


def rebuilt_layers(job: JobSpec, stage: int = 0) -> int:
    """Layers whose whole activations a full recompute rebuilds at once during the backward on rank ``stage``
    (its largest chunk's group; 0 otherwise)."""
    if job.recompute != "full":
        return 0
    biggest = max(job.split[stage])
    return min(num_layers(job), biggest) if job.recompute_method == "uniform" else min(1, biggest)


def recomputed_fraction(job: JobSpec, stage: int = 0) -> float:
    """Share of rank ``stage``'s layers whose forward the backward re-runs under full recompute."""
    n = job.stage_layers(stage)
    return checkpointed_layers(job, stage) / n if n else 0.0
