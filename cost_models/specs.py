"""Specifications of a model, a GPU and a training job (frozen values, validated on construction).

Units are in the field names: ``_tflops`` (10^12 FLOP/s), ``_gb`` (10^9 bytes), ``_gbs`` (10^9 bytes/s).
A *rank* of the simulator is one tensor-parallel group of ``tp`` GPUs: TP is folded into the cost model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dcpsim.cost_models.attention_backends import check_attention_backend
from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.stragglers import NO_STRAGGLERS, Stragglers

if TYPE_CHECKING:
    import numpy as np


MLP_MATRICES = {"swiglu": 3, "gelu": 2}  # weight matrices of one MLP (gate, up, down / up, down)
MOE_DISPATCHERS = ("alltoall", "flex")  # Megatron --moe-token-dispatcher-type values dcpsim prices
RECOMPUTE_MODES = ("none", "selective", "full")  # Megatron-LM --recompute-granularity (none: flag absent)
RECOMPUTE_METHODS = ("uniform", "block")  # Megatron-LM --recompute-method


def _require(cond: bool, what: str, value: object, valid: str) -> None:
    if not cond:
        raise SpecError(f"{what} = {value!r} is invalid: {valid}")


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
            _require(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"model.{f}", v,
                     "a positive integer")
        _require(self.heads % self.kv_heads == 0, "model.kv_heads", self.kv_heads,
                 f"must divide model.heads = {self.heads}")
        _require(self.mlp in MLP_MATRICES, "model.mlp", self.mlp, f"one of {', '.join(MLP_MATRICES)}")
        for f in ("experts", "experts_per_token", "expert_ffn", "shared_expert_ffn"):
            v = getattr(self, f)
            _require(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"model.{f}", v,
                     "an integer ≥ 0")
        object.__setattr__(self, "dense_layers", tuple(sorted(set(self.dense_layers))))
        if self.experts:
            _require(1 <= self.experts_per_token <= self.experts, "model.experts_per_token",
                     self.experts_per_token, f"an integer in 1..model.experts = {self.experts}")
            _require(self.expert_ffn > 0, "model.expert_ffn", self.expert_ffn,
                     "a positive integer in a MoE model (model.experts > 0)")
            bad = [i for i in self.dense_layers if not (isinstance(i, int) and 0 <= i < self.layers)]
            _require(not bad, "model.dense_layers", list(self.dense_layers),
                     f"layer indices in 0..{self.layers - 1}")
        else:
            for f in ("experts_per_token", "expert_ffn", "shared_expert_ffn"):
                _require(getattr(self, f) == 0, f"model.{f}", getattr(self, f),
                         "0 in a dense model (set model.experts > 0 for a MoE model)")
            _require(not self.dense_layers, "model.dense_layers", list(self.dense_layers),
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
            _require(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, f"gpu.{f}", v,
                     "a positive number")
        for f in ("gpus_per_node", "nvlink_domain", "nics_per_node"):
            v = getattr(self, f)
            _require(isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"gpu.{f}", v,
                     "a positive integer")
        _require(self.nvlink_domain % self.gpus_per_node == 0, "gpu.nvlink_domain", self.nvlink_domain,
                 f"a multiple of gpu.gpus_per_node = {self.gpus_per_node} (a domain is a whole number of nodes)")
        if self.nic_gbs is not None:
            v = self.nic_gbs
            _require(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "gpu.nic_gbs", v,
                     "a positive number (the NIC's line rate in 10^9 bytes/s)")
            _require(self.network_gbs <= v, "gpu.network_gbs", self.network_gbs,
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
    memory_reserve_gb: float = 6.0  # CUDA context, NCCL buffers, fragmentation
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

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "pool", "context_len", "global_batch_tokens", "ep"):
            v = getattr(self, f)
            _require(isinstance(v, int) and v >= 1, f"job.{f}", v, "a positive integer")
        _require(self.model.heads % self.tp == 0, "job.tp", self.tp,
                 f"must divide model.heads = {self.model.heads}")
        _require(self.model.kv_heads % self.tp == 0 or self.tp % self.model.kv_heads == 0, "job.tp", self.tp,
                 f"must divide model.kv_heads = {self.model.kv_heads} or be a multiple of it")
        _require(self.model.layers % self.pp == 0, "job.pp", self.pp,
                 f"must divide model.layers = {self.model.layers}")
        _require(isinstance(self.vpp, int) and self.vpp >= 1, "job.vpp", self.vpp, "a positive integer")
        if self.vpp > 1:  # Megatron: interleaving needs pp > 1 and whole layers per virtual stage
            _require(self.pp >= 2, "job.vpp", self.vpp, f"1 at job.pp = {self.pp} (interleaving needs pp ≥ 2)")
            _require(self.model.layers % (self.pp * self.vpp) == 0, "job.vpp", self.vpp,
                     f"pp · vpp = {self.pp * self.vpp} must divide model.layers = {self.model.layers}")
        _require(self.tp <= self.gpu.nvlink_domain and self.gpu.nvlink_domain % self.tp == 0, "job.tp", self.tp,
                 f"must divide gpu.nvlink_domain = {self.gpu.nvlink_domain} (TP stays inside an NVLink domain)")
        _require(self.memory_reserve_gb >= 0, "job.memory_reserve_gb", self.memory_reserve_gb, "≥ 0")
        _require(isinstance(self.tp_comm_overlap, (int, float)) and 0.0 <= self.tp_comm_overlap <= 1.0,
                 "job.tp_comm_overlap", self.tp_comm_overlap, "a fraction between 0 (exposed) and 1 (hidden)")
        check_attention_backend(self.attention_backend, "job.attention_backend")
        _require(self.recompute in RECOMPUTE_MODES, "job.recompute", self.recompute,
                 f"one of {', '.join(RECOMPUTE_MODES)}")
        _require(self.recompute_method in RECOMPUTE_METHODS, "job.recompute_method", self.recompute_method,
                 f"one of {', '.join(RECOMPUTE_METHODS)}")
        if self.recompute_layers is not None:
            _require(self.recompute == "full", "job.recompute_layers", self.recompute_layers,
                     "unset unless job.recompute = 'full' (Megatron: --recompute-num-layers goes with full)")
            _require(isinstance(self.recompute_layers, int) and not isinstance(self.recompute_layers, bool)
                     and 1 <= self.recompute_layers <= self.layers_per_virtual_stage, "job.recompute_layers",
                     self.recompute_layers, f"an integer in 1..{self.layers_per_virtual_stage} (the layers of one "
                     "model chunk)")
        for f in ("grad_reduce_in_fp32", "overlap_grad_reduce", "overlap_param_gather"):
            _require(isinstance(getattr(self, f), bool), f"job.{f}", getattr(self, f), "true or false")
        _require(self.overlap_grad_reduce or not self.overlap_param_gather, "job.overlap_param_gather", True,
                 "false unless job.overlap_grad_reduce is true (Megatron: --overlap-param-gather needs "
                 "--overlap-grad-reduce)")
        _require(self.moe_dispatcher in MOE_DISPATCHERS, "job.moe_dispatcher", self.moe_dispatcher,
                 f"one of {', '.join(MOE_DISPATCHERS)}")
        if self.etp is not None:
            _require(isinstance(self.etp, int) and not isinstance(self.etp, bool) and self.etp >= 1, "job.etp",
                     self.etp, "a positive integer")
            _require(self.model.is_moe or self.etp == self.tp, "job.etp", self.etp,
                     f"unset or = job.tp = {self.tp} for the dense model {self.model.name!r} (it has no experts)")
            _require(self.gpu.nvlink_domain % self.etp == 0, "job.etp", self.etp,
                     f"must divide gpu.nvlink_domain = {self.gpu.nvlink_domain} (expert TP stays inside an "
                     "NVLink domain, as TP does)")
            if self.model.is_moe:
                _require(self.model.expert_ffn % self.etp == 0, "job.etp", self.etp,
                         f"must divide model.expert_ffn = {self.model.expert_ffn} (Megatron shards each expert's "
                         "FFN over ETP)")
        if self.ep > 1:
            _require(self.model.is_moe, "job.ep", self.ep, f"1 for the dense model {self.model.name!r} "
                     "(expert parallelism needs a MoE model)")
        if self.model.is_moe:  # Megatron-Core parallel_state: the expert world etp·ep·edp is the stage's tp·cp·dp
            world, ew = self.tp * self.pool, self.expert_tp * self.ep
            _require(world % self.expert_tp == 0, "job.etp", self.expert_tp,
                     f"a divisor of tp · pool = {world} (Megatron: ETP x EP must divide TP x CP x DP)")
            valid_ep = [e for e in range(1, world // self.expert_tp + 1)
                        if world % (self.expert_tp * e) == 0 and self.model.experts % e == 0]
            _require(world % ew == 0, "job.ep", self.ep,
                     f"must make etp · ep = {self.expert_tp} · {self.ep} divide tp · pool = {world} (Megatron: the "
                     f"expert model-parallel world ETP x EP divides TP x CP x DP); valid ep at etp = "
                     f"{self.expert_tp}: {', '.join(map(str, valid_ep))}")
        _require(self.model.experts % self.ep == 0 or self.ep == 1, "job.ep", self.ep,
                 f"must divide model.experts = {self.model.experts}")
        if self.max_tokens_per_rank is not None:
            _require(self.max_tokens_per_rank >= 1, "job.max_tokens_per_rank", self.max_tokens_per_rank,
                     "a positive integer")
        _require(isinstance(self.stragglers, Stragglers), "job.stragglers", self.stragglers,
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

    @property
    def layers_per_stage(self) -> int:
        return self.model.layers // self.pp

    @property
    def layers_per_virtual_stage(self) -> int:
        """Layers of one model chunk: layers / (pp · vpp) (= layers_per_stage at vpp = 1)."""
        return self.model.layers // (self.pp * self.vpp)

    @property
    def heads_per_rank(self) -> int:
        return self.model.heads // self.tp

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads held by one TP rank (replicated when TP exceeds the KV-head count)."""
        return max(1, self.model.kv_heads // self.tp)

    def with_(self, **changes) -> JobSpec:
        return replace(self, **changes)
