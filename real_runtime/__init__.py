"""real_runtime: run what the simulator models, for real, with torch.distributed (NCCL on GPUs, gloo on CPUs).

The simulator predicts how a Plan (CP groups of different sizes and engines, per microbatch) performs; this
package executes the same Plan and measures it, so that predictions can be checked and the cost model
calibrated. torch is an optional dependency: ``import real_runtime`` itself needs nothing, the subpackages
need torch, and nothing here imports ``sim`` or ``experiments`` (nor simpy).

What it holds now
-----------------
:mod:`real_runtime.attention`: the context-parallel attention engines, forward and backward, over packed
documents (causal, document-masked, GQA):

* **ring** over a process group with dual-chunk load balancing per document (TransformerEngine's THD layout):
  every document is cut into ``2c`` chunks and rank ``i`` holds chunks ``i`` and ``2c-1-i``;
* **Ulysses**: all-to-all from sequence-sharded to head-sharded, local attention, all-to-all back;
* **hierarchical** (``hybrid(u, r)`` in a Plan): Ulysses inside groups of ``u`` ranks, a ring over ``r``
  such groups;
* the shared input layout and its shard / unshard / gather helpers, the local varlen kernel with log-sum-exp
  and its merge rule, optional flash-attn kernels on GPUs, and a dense reference for tests.

What it will hold
-----------------
* a **process-group pool**: every CP group (ranks, engine) a policy may use, created once at start-up, since
  creating NCCL communicators per microbatch is far too slow;
* a **runner** that executes a Plan on a small Llama-style model under torchrun: per microbatch, each CP group
  shards its sequences, runs forward and backward through the pipeline stages, then the pool synchronises
  gradients, while recording a Timeline with the simulator's schema;
* **profilers** for attention kernels, GEMMs and collectives that write the calibration tables
  ``cost_models`` fits;
* **``dcpsim validate``** (in ``experiments``): compare measured and simulated timelines per microbatch and per
  iteration, and check that the policies' ranking is preserved.
"""
