"""Specifications of a model, a GPU and a training job (frozen values, validated on construction).

Units are in the field names: ``_tflops`` (10^12 FLOP/s), ``_gb`` (10^9 bytes), ``_gbs`` (10^9 bytes/s).
A *rank* of the simulator is one tensor-parallel group of ``tp`` GPUs: TP is folded into the cost model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dcpsim.cost_models.attention_backends import check_attention_backend
from dcpsim.cost_models.errors import require
from dcpsim.cost_models.pipeline_split import check_pipeline_split, pipeline_split
from dcpsim.cost_models.stragglers import NO_STRAGGLERS, Stragglers

if TYPE_CHECKING:
    import numpy as np


MLP_MATRICES = {"swiglu": 3, "gelu": 2}  # weight matrices of one MLP (gate, up, down / up, down)
MOE_DISPATCHERS = ("alltoall", "flex")  # Megatron --moe-token-dispatcher-type values dcpsim prices
RECOMPUTE_MODES = ("none", "selective", "full")  # Megatron-LM --recompute-granularity (none: flag absent)
RECOMPUTE_METHODS = ("uniform", "block")  # Megatron-LM --recompute-method


# Caps on a model's sizes: not working sizes but bounds that keep every count within int64 and every per-layer
# table small. The largest published decoders stay far below (Llama 3 405B: 126 layers, hidden 16384, vocab
# 128256; DeepSeek-V3: 61 layers, vocab 129280).
MAX_LAYERS = 10_000
MAX_MODEL_DIM = 1 << 24


# Caps on a job's sizes, refused up front with the limit named: token counts stay exact in int64 sums (as
# traces.trace.MAX_LENGTH, 2^40, for one document), and the pool stays where a run ends: 2^14 ranks per stage is
# a bound, not a working size (the largest shipped scenario, prod-11264-256k, has a pool of 88; a pool of 1,024
# with static-cp on the default scenario took over 120 s for one iteration on 2 shared cores, measured with
# `dcpsim compare --pool 1024 --global-batch-tokens 67108864 --policies static-cp --iterations 1`).
JOB_CAPS = {
    "context_len": (2**40, "tokens; 2^40, far above any context window"),
    "global_batch_tokens": (2**40, "tokens per global batch; 2^40"),
    "pool": (2**14, "ranks per pipeline stage; 2^14, a bound on what the simulator runs"),
}  # tp, pp and ep are bounded through what they must divide (the NVLink domain, the layers, the pool)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer with grouped-query attention (Llama style), dense or mixture-of-experts.

    Dense layers have a ``mlp`` MLP of size ``ffn`` (SwiGLU: gate, up and down matrices; GELU: up and down).
    A MoE model (``experts`` > 0) replaces the MLP of every layer not listed in ``dense_layers`` by a router
    (h × E), ``experts`` experts of size ``expert_ffn`` of which each token uses ``experts_per_token``, and
    optionally a shared expert of size ``shared_expert_ffn`` that every token uses (with a sigmoid gate of h
    weights when ``shared_expert_gate``: Qwen2-MoE). Biases: ``qkv_bias`` (Qwen2), ``o_bias`` (Llama's
    ``attention_bias`` adds both). ``qk_norm``: RMSNorm over each head's queries and keys (Qwen3).
    ``source`` says where the numbers come from (a model card, a file).
    """

    name: str
    hidden: int  # h
    ffn: int  # f, dense MLP intermediate size
    layers: int
    heads: int  # a, query heads
    kv_heads: int  # g, key/value heads
    head_dim: int  # d
    vocab: int
    mlp: str = "swiglu"  # "swiglu" (3 matrices) or "gelu" (2 matrices)
    tied_embeddings: bool = False  # output head shares the input embedding's weights
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    experts: int = 0  # E, routed experts per MoE layer; 0 = dense model
    experts_per_token: int = 0  # k
    expert_ffn: int = 0  # intermediate size of one routed expert
    shared_expert_ffn: int = 0  # intermediate size of the shared expert (0 = none)
    shared_expert_gate: bool = False
    dense_layers: tuple[int, ...] = ()  # in a MoE model: layers (0-based) with a dense MLP instead
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab"):
            v = getattr(self, f)
            require(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"model.{f}", v,
                     "a positive integer")
            cap = MAX_LAYERS if f == "layers" else MAX_MODEL_DIM
            require(v <= cap, f"model.{f}", v, f"at most {cap:,} (a cap far above any published model)")
        require(self.heads % self.kv_heads == 0, "model.kv_heads", self.kv_heads,
                 f"must divide model.heads = {self.heads}")
        require(self.mlp in MLP_MATRICES, "model.mlp", self.mlp, f"one of {', '.join(MLP_MATRICES)}")
        for f in ("experts", "experts_per_token", "expert_ffn", "shared_expert_ffn"):
            v = getattr(self, f)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"model.{f}", v,
                     "an integer ≥ 0")
        object.__setattr__(self, "dense_layers", tuple(sorted(set(self.dense_layers))))
        if self.experts:
            require(1 <= self.experts_per_token <= self.experts, "model.experts_per_token",
                     self.experts_per_token, f"an integer in 1..model.experts = {self.experts}")
            require(self.expert_ffn > 0, "model.expert_ffn", self.expert_ffn,
                     "a positive integer in a MoE model (model.experts > 0)")
            bad = [i for i in self.dense_layers if not (isinstance(i, int) and 0 <= i < self.layers)]
            require(not bad, "model.dense_layers", list(self.dense_layers),
                     f"layer indices in 0..{self.layers - 1}")
        else:
            for f in ("experts_per_token", "expert_ffn", "shared_expert_ffn"):
                require(getattr(self, f) == 0, f"model.{f}", getattr(self, f),
                         "0 in a dense model (set model.experts > 0 for a MoE model)")
            require(not self.dense_layers, "model.dense_layers", list(self.dense_layers),
                     "empty in a dense model")

    # ---- structure -------------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer not in self.dense_layers

    @property
    def moe_layers(self) -> int:
        """Number of MoE layers."""
        return self.layers - len(self.dense_layers) if self.is_moe else 0

    # ---- parameters (counts, one layer) ----------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        """Q, K, V and O projections with their biases."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        p = h * q + 2 * h * kv + q * h
        if self.qkv_bias:
            p += q + 2 * kv
        if self.o_bias:
            p += h
        return p

    @property
    def dense_mlp_params(self) -> int:
        return MLP_MATRICES[self.mlp] * self.hidden * self.ffn

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return MLP_MATRICES[self.mlp] * self.hidden * self.expert_ffn

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def shared_expert_params(self) -> int:
        return MLP_MATRICES[self.mlp] * self.hidden * self.shared_expert_ffn + (
            self.hidden if self.shared_expert_gate and self.shared_expert_ffn else 0)

    @property
    def norm_params_per_layer(self) -> int:
        """The two RMSNorm weight vectors, and the per-head query/key norms of Qwen3."""
        return 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)

    def layer_params(self, layer: int, active: bool = False) -> int:
        """Matrix parameters of layer ``layer`` (attention, MLP or router + experts); ``active``: those one
        token uses (k routed experts instead of all E). Norm weights excluded (see norm_params_per_layer)."""
        if not self.is_moe_layer(layer):
            return self.attn_params + self.dense_mlp_params
        routed = (self.experts_per_token if active else self.experts) * self.expert_params
        return self.attn_params + self.router_params + self.shared_expert_params + routed

    def stage_layer_counts(self, first: int, count: int) -> tuple[int, int]:
        """(dense layers, MoE layers) among layers first .. first+count−1."""
        moe = sum(self.is_moe_layer(i) for i in range(first, first + count)) if self.is_moe else 0
        return count - moe, moe

    @property
    def params_per_layer(self) -> int:
        """Matrix parameters of one layer (for a MoE model the mean over layers, all experts counted)."""
        if not self.is_moe:
            return self.attn_params + self.dense_mlp_params
        return round(sum(self.layer_params(i) for i in range(self.layers)) / self.layers)

    @property
    def active_params_per_layer(self) -> float:
        """Matrix parameters one token uses in one layer, mean over layers (= params_per_layer if dense)."""
        if not self.is_moe:
            return float(self.params_per_layer)
        return sum(self.layer_params(i, active=True) for i in range(self.layers)) / self.layers

    @property
    def embedding_params(self) -> int:
        """Input embedding plus output head (once when tied)."""
        return (1 if self.tied_embeddings else 2) * self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All matrix parameters: layers plus input embedding and (untied) output head (no norms)."""
        return sum(self.layer_params(i) for i in range(self.layers)) + self.embedding_params

    @property
    def params_total(self) -> int:
        """Every parameter, as a checkpoint counts them: matrices, biases, norms (and the final norm)."""
        return self.params + self.layers * self.norm_params_per_layer + self.hidden

    @property
    def params_active(self) -> int:
        """Parameters one token uses: as params_total with k routed experts per MoE layer instead of E
        (embedding and head included, the usual convention of MoE model cards)."""
        routed_unused = (self.experts - self.experts_per_token) * self.expert_params * self.moe_layers
        return self.params_total - routed_unused


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator, the node it sits in and the cluster around it (published figures; the presets and
    their sources are in cost_models/presets.py, docs/models.md "GPUs and clusters").

    Two levels of interconnect. GPUs of one *NVLink domain* (``nvlink_domain`` GPUs: one 8-GPU HGX node, or a
    whole GB200 NVL72 rack of 72; AMD's Infinity Fabric for the MI300X) talk at ``nvlink_gbs``; GPUs of
    different domains go through the scale-out NICs, ``nics_per_node`` per node of ``gpus_per_node`` GPUs,
    each carrying ``network_gbs`` of NCCL bandwidth (``nic_gbs`` is its line rate). A domain is a whole number
    of nodes. (GPU files default the domain to one node and to one NIC per GPU, rail-optimised as in NVIDIA's
    DGX/HGX reference architectures: cost_models.gpu_files.)
    """

    name: str
    peak_bf16_tflops: float  # dense BF16
    hbm_gb: float  # capacity, 10^9 bytes
    hbm_bw_gbs: float  # HBM bandwidth
    nvlink_gbs: float  # effective NCCL bus bandwidth inside an NVLink domain
    network_gbs: float  # effective NCCL bandwidth of one NIC (one GPU's rail) across domains
    gpus_per_node: int  # GPUs per node (server, or GB200 compute tray): the unit NICs are counted in
    nvlink_domain: int  # GPUs sharing one NVLink domain (8 on HGX, 72 on GB200 NVL72)
    nics_per_node: int  # scale-out NICs per node (one per GPU on rail-optimised clusters)
    nic_gbs: float | None = None  # line rate of one NIC, 10^9 bytes/s (None: not stated)
    source: str = ""  # where the numbers come from

    def __post_init__(self) -> None:
        for f in ("peak_bf16_tflops", "hbm_gb", "hbm_bw_gbs", "nvlink_gbs", "network_gbs"):
            v = getattr(self, f)
            require(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf, f"gpu.{f}", v,
                     "a positive finite number")
        for f in ("gpus_per_node", "nvlink_domain", "nics_per_node"):
            v = getattr(self, f)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"gpu.{f}", v,
                     "a positive integer")
        require(self.nvlink_domain % self.gpus_per_node == 0, "gpu.nvlink_domain", self.nvlink_domain,
                 f"a multiple of gpu.gpus_per_node = {self.gpus_per_node} (a domain is a whole number of nodes)")
        if self.nic_gbs is not None:
            v = self.nic_gbs
            require(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf, "gpu.nic_gbs",
                     v, "a positive finite number (the NIC's line rate in 10^9 bytes/s)")
            require(self.network_gbs <= v, "gpu.network_gbs", self.network_gbs,
                     f"at most the NIC line rate gpu.nic_gbs = {v:g} (it is NCCL's bandwidth over one NIC)")

    @property
    def nodes_per_domain(self) -> int:
        return self.nvlink_domain // self.gpus_per_node

    @property
    def nics_per_domain(self) -> int:
        """Scale-out NICs of one NVLink domain (PXN lets a GPU use any of them over NVLink)."""
        return self.nics_per_node * self.nodes_per_domain


@dataclass(frozen=True)
class JobSpec:
    """One training job: model, GPU and its parallel layout.

    ``pool`` is W = DP x CP, the ranks per pipeline stage that share the stage's weights; the job uses
    ``tp * pp * pool`` GPUs. ``max_tokens_per_rank`` overrides the per-rank token budget derived from
    memory (see :func:`cost_models.memory.max_tokens_per_rank`).
    """

    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    pool: int = 8
    context_len: int = 32768
    global_batch_tokens: int = 1 << 20
    # CUDA context, NCCL buffers, allocator fragmentation: not measured here; an upper bound comes from the
    # dgxc rows that ran (tests/cost_models/test_dgxc_memory.py): each fits with a reserve up to 8.1 GB (D6,
    # the tightest), so 6 GB admits them all; a run's own peak (torch.cuda.max_memory_reserved) replaces it.
    memory_reserve_gb: float = 6.0
    max_tokens_per_rank: int | None = None
    ep: int = 1  # expert-parallel degree, carved from the pool (Megatron-Core: EP inside DP x CP)
    # Expert-tensor-parallel degree, Megatron's --expert-tensor-parallel-size: the routed experts are sharded over
    # ETP GPUs instead of TP; None = TP (Megatron-LM's default). Expert rank order etp-ep-dp (cost_models.moe).
    etp: int | None = None
    # MoE token dispatcher, Megatron's --moe-token-dispatcher-type: alltoall (every routed copy sent) or flex
    # (DeepEP: one copy per destination NVLink domain across the network, fanned out over NVLink).
    moe_dispatcher: str = "alltoall"
    moe_recompute: bool = True  # MoE layers recompute router + experts in the backward (cost_models.moe)
    # Fraction of the TP/SP all-gathers and reduce-scatters hidden behind GEMMs. 0 = all exposed, as Megatron-LM
    # runs without --tp-comm-overlap (its default); TransformerEngine's userbuffers overlap hides most of it.
    tp_comm_overlap: float = 0.0
    # Attention kernels priced (cost_models.attention_backends): fa2, fa3, cudnn; None = what Megatron-Core with
    # TransformerEngine picks on the GPU (cudnn on Hopper and newer).
    attention_backend: str | None = None
    # Per-slot compute slow-down factors ≥ 1 (cost_models.stragglers); the default: every rank at full speed.
    stragglers: Stragglers = NO_STRAGGLERS
    # Virtual stages (model chunks) per pipeline rank: V > 1 runs Megatron's interleaved 1F1B
    # (--num-virtual-stages-per-pipeline-rank; policies.pipeline_order), each chunk layers / (pp·V) layers.
    vpp: int = 1
    # Activation recompute, Megatron-LM's --recompute-granularity (none: its default), --recompute-method and
    # --recompute-num-layers (cost_models.recompute); recompute_layers None = 1 with full, unused otherwise.
    recompute: str = "none"
    recompute_method: str = "uniform"
    recompute_layers: int | None = None
    # Gradient buffers in fp32 (Megatron-LM with --bf16 accumulates and reduces gradients in fp32; NeMo's
    # performance recipes set grad_reduce_in_fp32 = False: bf16 buffers), cost_models.memory.
    grad_reduce_in_fp32: bool = True
    # Megatron-LM's --overlap-grad-reduce and --overlap-param-gather (both off by default), with the distributed
    # optimizer dcpsim always assumes (cost_models.dp_overlap).
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    # Megatron-Core's uneven pipeline split (TransformerConfig fields of the same names; cost_models.pipeline_split):
    # the embedding (loss) counts as one layer of the first (last) virtual stage, or the first (last) pipeline
    # stage holds the given number of transformer layers. All off: layers / (pp · vpp) per virtual stage.
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "pool", "context_len", "global_batch_tokens", "ep"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 1, f"job.{f}", v, "a positive integer")
            cap = JOB_CAPS.get(f)
            if cap is not None:
                require(v <= cap[0], f"job.{f}", v, f"at most {cap[0]:,} ({cap[1]})")
        require(self.model.heads % self.tp == 0, "job.tp", self.tp,
                 f"must divide model.heads = {self.model.heads}")
        require(self.model.kv_heads % self.tp == 0 or self.tp % self.model.kv_heads == 0, "job.tp", self.tp,
                 f"must divide model.kv_heads = {self.model.kv_heads} or be a multiple of it")
        require(isinstance(self.vpp, int) and self.vpp >= 1, "job.vpp", self.vpp, "a positive integer")
        if self.vpp > 1:  # Megatron: interleaving needs pp > 1
            require(self.pp >= 2, "job.vpp", self.vpp, f"1 at job.pp = {self.pp} (interleaving needs pp ≥ 2)")
        split = (self.model.layers, self.pp, self.vpp, self.account_for_embedding_in_pipeline_split,
                 self.account_for_loss_in_pipeline_split, self.num_layers_in_first_pipeline_stage,
                 self.num_layers_in_last_pipeline_stage)
        check_pipeline_split(*split)
        object.__setattr__(self, "_split", pipeline_split(*split))
        require(self.tp <= self.gpu.nvlink_domain and self.gpu.nvlink_domain % self.tp == 0, "job.tp", self.tp,
                 f"must divide gpu.nvlink_domain = {self.gpu.nvlink_domain} (TP stays inside an NVLink domain)")
        require(self.memory_reserve_gb >= 0, "job.memory_reserve_gb", self.memory_reserve_gb, "≥ 0")
        require(isinstance(self.tp_comm_overlap, (int, float)) and 0.0 <= self.tp_comm_overlap <= 1.0,
                 "job.tp_comm_overlap", self.tp_comm_overlap, "a fraction between 0 (exposed) and 1 (hidden)")
        check_attention_backend(self.attention_backend, "job.attention_backend")
        require(self.recompute in RECOMPUTE_MODES, "job.recompute", self.recompute,
                 f"one of {', '.join(RECOMPUTE_MODES)}")
        require(self.recompute_method in RECOMPUTE_METHODS, "job.recompute_method", self.recompute_method,
                 f"one of {', '.join(RECOMPUTE_METHODS)}")
        if self.recompute_layers is not None:
            require(self.recompute == "full", "job.recompute_layers", self.recompute_layers,
                     "unset unless job.recompute = 'full' (Megatron: --recompute-num-layers goes with full)")
            require(isinstance(self.recompute_layers, int) and not isinstance(self.recompute_layers, bool)
                     and 1 <= self.recompute_layers <= self.max_chunk_layers, "job.recompute_layers",
                     self.recompute_layers, f"an integer in 1..{self.max_chunk_layers} (the layers of the largest "
                     "model chunk)")
        for f in ("grad_reduce_in_fp32", "overlap_grad_reduce", "overlap_param_gather"):
            require(isinstance(getattr(self, f), bool), f"job.{f}", getattr(self, f), "true or false")
        require(self.overlap_grad_reduce or not self.overlap_param_gather, "job.overlap_param_gather", True,
                 "false unless job.overlap_grad_reduce is true (Megatron: --overlap-param-gather needs "
                 "--overlap-grad-reduce)")
        require(self.moe_dispatcher in MOE_DISPATCHERS, "job.moe_dispatcher", self.moe_dispatcher,
                 f"one of {', '.join(MOE_DISPATCHERS)}")
        if self.etp is not None:
            require(isinstance(self.etp, int) and not isinstance(self.etp, bool) and self.etp >= 1, "job.etp",
                     self.etp, "a positive integer")
            require(self.model.is_moe or self.etp == self.tp, "job.etp", self.etp,
                     f"unset or = job.tp = {self.tp} for the dense model {self.model.name!r} (it has no experts)")
            require(self.gpu.nvlink_domain % self.etp == 0, "job.etp", self.etp,
                     f"must divide gpu.nvlink_domain = {self.gpu.nvlink_domain} (expert TP stays inside an "
                     "NVLink domain, as TP does)")
            if self.model.is_moe:
                require(self.model.expert_ffn % self.etp == 0, "job.etp", self.etp,
                         f"must divide model.expert_ffn = {self.model.expert_ffn} (Megatron shards each expert's "
                         "FFN over ETP)")
        if self.ep > 1:
            require(self.model.is_moe, "job.ep", self.ep, f"1 for the dense model {self.model.name!r} "
                     "(expert parallelism needs a MoE model)")
        if self.model.is_moe:  # Megatron-Core parallel_state: the expert world etp·ep·edp is the stage's tp·cp·dp
            world, ew = self.tp * self.pool, self.expert_tp * self.ep
            require(world % self.expert_tp == 0, "job.etp", self.expert_tp,
                     f"a divisor of tp · pool = {world} (Megatron: ETP x EP must divide TP x CP x DP)")
            valid_ep = [e for e in range(1, world // self.expert_tp + 1)
                        if world % (self.expert_tp * e) == 0 and self.model.experts % e == 0]
            require(world % ew == 0, "job.ep", self.ep,
                     f"must make etp · ep = {self.expert_tp} · {self.ep} divide tp · pool = {world} (Megatron: the "
                     f"expert model-parallel world ETP x EP divides TP x CP x DP); valid ep at etp = "
                     f"{self.expert_tp}: {', '.join(map(str, valid_ep))}")
        require(self.model.experts % self.ep == 0 or self.ep == 1, "job.ep", self.ep,
                 f"must divide model.experts = {self.model.experts}")
        if self.max_tokens_per_rank is not None:
            require(self.max_tokens_per_rank >= 1, "job.max_tokens_per_rank", self.max_tokens_per_rank,
                     "a positive integer")
        require(isinstance(self.stragglers, Stragglers), "job.stragglers", self.stragglers,
                 "a cost_models.stragglers.Stragglers")
        self.stragglers.check(self.pp, self.pool, self.tp, "job.stragglers")

    def slowdown(self) -> np.ndarray:
        """[pp, pool] each (stage, pool rank)'s compute slow-down factor ≥ 1 (all ones without stragglers)."""
        return self.stragglers.factors(self.pp, self.pool, self.tp)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.pool

    @property
    def expert_tp(self) -> int:
        """ETP: the GPUs one routed expert is sharded over (``etp``; unset: TP, Megatron-LM's default)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """EDP: the stage's tp · pool GPUs / (ETP · EP), the ranks an expert's gradients are reduced over."""
        return self.tp * self.pool // (self.expert_tp * self.ep)

    # ---- the pipeline split (cost_models.pipeline_split, computed once in __post_init__) -------------------
    @property
    def split(self) -> tuple[tuple[int, ...], ...]:
        """Transformer layers of chunk c of pipeline rank r, ``split[r][c]`` (virtual stage c·p + r)."""
        return self._split  # type: ignore[attr-defined]

    @property
    def even_split(self) -> bool:
        """Whether every virtual stage holds the same layers (layers / (pp · vpp) each)."""
        first = self.split[0][0]
        return all(n == first for row in self.split for n in row)

    def stage_layers(self, stage: int) -> int:
        """Transformer layers of pipeline rank ``stage``, all its model chunks."""
        return sum(self.split[stage])

    def chunk_layers(self, stage: int, chunk: int) -> int:
        """Transformer layers of model chunk ``chunk`` of pipeline rank ``stage`` (virtual stage chunk·p + stage)."""
        return self.split[stage][chunk]

    def stage_first_layer(self, stage: int) -> int:
        """The first layer of ``stage`` when each rank's layers are taken as one contiguous slice (the MoE layer
        mix of a rank: cost_models.moe.stage_layers)."""
        return sum(self.stage_layers(s) for s in range(stage))

    @property
    def max_chunk_layers(self) -> int:
        """Layers of the largest model chunk."""
        return max(max(row) for row in self.split)

    def chunk_shares(self, stage: int) -> tuple[float, ...]:
        """Each chunk's share of rank ``stage``'s layers (1/V each when the split is even or the rank has none):
        the part of the rank's per-microbatch costs and activations a chunk's operation carries."""
        row, n = self.split[stage], self.stage_layers(stage)
        if self.even_split or n == 0:
            return (1.0 / self.vpp,) * self.vpp
        return tuple(c / n for c in row)

    @property
    def heads_per_rank(self) -> int:
        return self.model.heads // self.tp

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads held by one TP rank (replicated when TP exceeds the KV-head count)."""
        return max(1, self.model.kv_heads // self.tp)

    def with_(self, **changes) -> JobSpec:
        return replace(self, **changes)
