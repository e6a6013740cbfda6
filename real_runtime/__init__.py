"""real_runtime: run what the simulator models, for real, with torch.distributed (NCCL on GPUs, gloo on CPUs).

The simulator predicts how a Plan (CP groups of different sizes and engines, per microbatch) performs; this
package executes the same Plan and measures it, so that predictions can be checked and the cost model
calibrated. torch is an optional dependency: ``import real_runtime`` itself needs nothing (nor does
:mod:`.options`), the other modules need torch, and nothing here imports ``sim`` or ``experiments`` (nor
simpy). docs/real_runtime.md is the user's guide.

Modules
-------
* :mod:`.attention`: the CP attention engines (ring with dual-chunk balancing, Ulysses, hierarchical
  Ulysses-in-ring) over packed documents, forward and backward;
* :mod:`.group_pool`: every process group a run needs, created once at start-up, looked up per microbatch;
* :mod:`.model`, :mod:`.data`, :mod:`.optim`: a small Llama-style decoder sized from a ``cost_models``
  preset, deterministic synthetic documents and their dual-chunk shards, SGD / AdamW;
* :mod:`.runner`: trains the model on Plans (PP = 1), recording a Timeline in the simulator's schema, and
  the single-process reference its losses must match; :mod:`.timing` measures phases and exposed CP
  communication;
* :mod:`.workload`, :mod:`.session`, :mod:`.launch`, :mod:`.run`: batches + plans per iteration, the worker
  side of a run, starting processes (spawn / torchrun), and ``python -m dcpsim.real_runtime.run``;
* :mod:`.profiler`, :mod:`.profile`: kernel and collective timings as profile tables
  (``python -m dcpsim.real_runtime.profile``), for ``dcpsim calibrate``;
* :mod:`.compare`: prediction errors between a simulated and a measured timeline (``dcpsim validate``).
"""
