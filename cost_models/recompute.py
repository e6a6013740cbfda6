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


def checkpointed_layers(job: JobSpec) -> int:
    """Layers of one model chunk that keep only their input (full recompute), of layers_per_virtual_stage."""
    if job.recompute != "full":
        return 0
    nl = job.layers_per_virtual_stage
    return nl if job.recompute_method == "uniform" else min(num_layers(job), nl)


def checkpoints(job: JobSpec) -> int:
    """Tensors (one layer input each) a model chunk keeps for its checkpointed layers: one per group of
    ``num_layers`` with the uniform method, one per layer with block."""
    n = checkpointed_layers(job)
    if job.recompute == "full" and job.recompute_method == "uniform":
        return -(-n // num_layers(job))
    return n


def rebuilt_layers(job: JobSpec) -> int:
    """Layers whose whole activations a full recompute rebuilds at once during the backward (0 otherwise)."""
    if job.recompute != "full":
        return 0
    return min(num_layers(job), job.layers_per_virtual_stage) if job.recompute_method == "uniform" else 1


def recomputed_fraction(job: JobSpec) -> float:
    """Share of a stage's layers whose forward the backward re-runs under full recompute."""
    return checkpointed_layers(job) / job.layers_per_virtual_stage
