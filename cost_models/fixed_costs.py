"""Fixed (token-independent) costs: the published defaults of the calibration's fixed-cost fields.

What makes many small microbatches (and many short ring steps) cost more than few large ones is the part of
a step that does not shrink with its tokens. dcpsim charges four kinds, each a calibration field (seconds,
one GPU; fitted from profile rows where measured, docs/calibration.md), gated by CostTerms.fixed_costs:

* per layer per microbatch (``layer_overhead_{fwd,bwd}_s``): one kernel floor κ per kernel the layer
  launches besides its work. Counted in Megatron-Core's TransformerEngine layer spec (SwiGLU, RMSNorm, RoPE,
  sequence parallelism, gradient-accumulation fusion on):
  forward 13 = RMSNorm + QKV GEMM (TE LayerNormLinear) + RoPE on q and k (2) + attention + its layout copy
  + O GEMM + bias-dropout-add + RMSNorm + FC1 GEMM (TE LayerNormMLP) + SwiGLU + FC2 GEMM + residual add;
  backward 21 = data and weight gradient of each of the 4 GEMMs (8) + 2 RMSNorm backwards of 2 kernels each
  (dx, dγ reduction: 4) + RoPE (2) + attention backward (FlashAttention: pre-process, main, dQ
  post-process: 3) + SwiGLU + 2 residual gradient adds + the layout copy.
* per ring step beyond the first (``ring_step_overhead_{fwd,bwd}_s``), TransformerEngine's
  ``AttnFuncWithCPAndKVP2P``: forward 5 = the step's attention call, its softmax-LSE correction and output
  correction, and the P2P send and receive launches; backward 7 = the step's attention backward (3), the dQ
  and dKV accumulations (2), and the send and receive of K, V / dK, dV (2).
* per collective call: the α of the calibration's link models (NCCL base + per-hop latency; already in every
  collective's time).
* per microbatch per stage (``microbatch_overhead_{fwd,bwd}_s``): the pipeline schedule's receive and send
  launches of the activation (forward) and its gradient (backward), 2 per pass (Megatron-Core
  ``pipeline_parallel/schedules.py``, ``p2p_communication.py``); their link time is the PP transfer's.

κ = 3.8 µs: the time per kernel of a stream of short kernels whose launches overlap execution (NVIDIA
Technical Blog, A. Gray, "Getting Started with CUDA Graphs", 2019: 3.8 µs per kernel launched back to back,
9.6 µs with a synchronisation after each, 3.4 µs as a CUDA graph; V100). Assumed: Hopper's launch path is no
faster (the launch is host- and PCIe-bound, not SM-bound). A measured profile replaces every one of these.

Not modelled: host (Python) dispatch that falls behind the GPU (a CPU-bound step: κ then underestimates),
CUDA graphs (which would shrink κ towards 3.4 µs), the optimizer's per-parameter kernels.
"""

from __future__ import annotations

KERNEL_FLOOR_S = 3.8e-6  # κ, module docstring
LAYER_KERNELS_FWD = 13
LAYER_KERNELS_BWD = 21
RING_STEP_KERNELS_FWD = 5
RING_STEP_KERNELS_BWD = 7
MICROBATCH_KERNELS = 2  # per pass

PUBLISHED = {
    "layer_overhead_fwd_s": LAYER_KERNELS_FWD * KERNEL_FLOOR_S,
    "layer_overhead_bwd_s": LAYER_KERNELS_BWD * KERNEL_FLOOR_S,
    "ring_step_overhead_fwd_s": RING_STEP_KERNELS_FWD * KERNEL_FLOOR_S,
    "ring_step_overhead_bwd_s": RING_STEP_KERNELS_BWD * KERNEL_FLOOR_S,
    "microbatch_overhead_fwd_s": MICROBATCH_KERNELS * KERNEL_FLOOR_S,
    "microbatch_overhead_bwd_s": MICROBATCH_KERNELS * KERNEL_FLOOR_S,
}
FIELDS = tuple(PUBLISHED)
SOURCE = ("fixed costs: kernels counted in Megatron-Core/TransformerEngine x 3.8 us per kernel (NVIDIA blog, "
          "Getting Started with CUDA Graphs, 2019)")
