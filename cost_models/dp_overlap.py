"""What Megatron-LM's --overlap-grad-reduce and --overlap-param-gather hide of the data-parallel collectives.

With the distributed optimizer (which dcpsim always assumes) a stage's gradients are reduce-scattered and its
updated parameters all-gathered over the pool of W = DP × CP ranks (cost_models.analytic_comm.grad_sync_s).
Megatron-Core's DistributedDataParallel groups parameters into buckets of
max(40,000,000, 1,000,000 · W) parameters (``DistributedDataParallelConfig.bucket_size``'s default,
megatron/core/distributed/distributed_data_parallel.py) in reverse layer order:

* ``--overlap-grad-reduce`` launches a bucket's reduce-scatter as soon as the last microbatch's backward has
  produced all its gradients, so every bucket but the last (the first layers', finished when the backward
  ends) runs behind the backward of the layers still to go: exposed is one bucket's share of the
  reduce-scatter (assumed: the rest keeps up with the backward, true where a bucket's reduce-scatter is
  shorter than the backward of the layers it covers, as on NVLink and 400 Gb/s NICs at the shipped sizes).
* ``--overlap-param-gather`` (needs the distributed optimizer and --overlap-grad-reduce) gathers each bucket
  of updated parameters just before the next iteration's forward uses it, behind the forward of the layers
  before: exposed is the first bucket's share of the all-gather.

Both are off in Megatron-LM by default (the flags are store_true); off, both collectives are exposed after
the stage's last backward. CostTerms.dp_overlap off: both exposed whatever the flags.
"""

from __future__ import annotations

from dcpsim.cost_models.specs import JobSpec

BUCKET_MIN_PARAMS = 40_000_000  # Megatron-Core DDP bucket_size default: max(40M, 1M · DP size)
BUCKET_PARAMS_PER_DP_RANK = 1_000_000


def bucket_params(job: JobSpec) -> int:
    """Parameters per gradient bucket (module docstring), the DP size being the pool (DP × CP)."""
    return max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK * job.pool)


def exposed_fractions(job: JobSpec, params_on_gpu: float) -> tuple[float, float]:
    """(reduce-scatter, all-gather) shares left exposed of a stage holding ``params_on_gpu`` parameters per
    GPU: one bucket's share for an overlapped collective, all of it otherwise."""
    one = min(1.0, bucket_params(job) / params_on_gpu) if params_on_gpu > 0 else 1.0
    return (one if job.overlap_grad_reduce else 1.0), (one if job.overlap_param_gather else 1.0)
