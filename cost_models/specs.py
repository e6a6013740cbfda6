"""Specifications of a model, a GPU and a training job (frozen values, validated on construction).

Units are in the field names: ``_tflops`` (10^12 FLOP/s), ``_gb`` (10^9 bytes), ``_gbs`` (10^9 bytes/s).
A *rank* of the simulator is one tensor-parallel group of ``tp`` GPUs: TP is folded into the cost model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dcpsim.cost_models.errors import SpecError


def _require(cond: bool, what: str, value: object, valid: str) -> None:
    if not cond:
        raise SpecError(f"{what} = {value!r} is invalid: {valid}")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer with SwiGLU MLP and grouped-query attention (Llama style)."""

    name: str
    hidden: int  # h
    ffn: int  # f, SwiGLU intermediate size
    layers: int
    heads: int  # a, query heads
    kv_heads: int  # g, key/value heads
    head_dim: int  # d
    vocab: int

    def __post_init__(self) -> None:
        for f in ("hidden", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab"):
            v = getattr(self, f)
            _require(isinstance(v, int) and v > 0, f"model.{f}", v, "a positive integer")
        _require(self.heads % self.kv_heads == 0, "model.kv_heads", self.kv_heads,
                 f"must divide model.heads = {self.heads}")

    @property
    def params_per_layer(self) -> int:
        """Parameters of one layer's matrices: QKV + O projections and the three SwiGLU matrices."""
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads * d) + 2 * h * (self.kv_heads * d) + (self.heads * d) * h
        return attn + 3 * h * self.ffn

    @property
    def params(self) -> int:
        """All parameters: layers plus input embedding and untied output head."""
        return self.layers * self.params_per_layer + 2 * self.vocab * self.hidden


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator and the node it sits in (published figures; sources in cost_models/presets.py)."""

    name: str
    peak_bf16_tflops: float  # dense BF16
    hbm_gb: float  # capacity, 10^9 bytes
    hbm_bw_gbs: float  # HBM bandwidth
    nvlink_gbs: float  # effective NCCL bus bandwidth inside a node
    network_gbs: float  # effective NCCL bandwidth per GPU across nodes
    gpus_per_node: int

    def __post_init__(self) -> None:
        for f in ("peak_bf16_tflops", "hbm_gb", "hbm_bw_gbs", "nvlink_gbs", "network_gbs"):
            v = getattr(self, f)
            _require(v > 0, f"gpu.{f}", v, "a positive number")
        _require(self.gpus_per_node >= 1, "gpu.gpus_per_node", self.gpus_per_node, "a positive integer")


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
    # Fraction of the TP/SP all-gathers and reduce-scatters hidden behind GEMMs. 0 = all exposed, as Megatron-LM
    # runs without --tp-comm-overlap (its default); TransformerEngine's userbuffers overlap hides most of it.
    tp_comm_overlap: float = 0.0

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "pool", "context_len", "global_batch_tokens"):
            v = getattr(self, f)
            _require(isinstance(v, int) and v >= 1, f"job.{f}", v, "a positive integer")
        _require(self.model.heads % self.tp == 0, "job.tp", self.tp,
                 f"must divide model.heads = {self.model.heads}")
        _require(self.model.kv_heads % self.tp == 0 or self.tp % self.model.kv_heads == 0, "job.tp", self.tp,
                 f"must divide model.kv_heads = {self.model.kv_heads} or be a multiple of it")
        _require(self.model.layers % self.pp == 0, "job.pp", self.pp,
                 f"must divide model.layers = {self.model.layers}")
        _require(self.tp <= self.gpu.gpus_per_node, "job.tp", self.tp,
                 f"at most gpu.gpus_per_node = {self.gpu.gpus_per_node} (TP stays inside a node)")
        _require(self.memory_reserve_gb >= 0, "job.memory_reserve_gb", self.memory_reserve_gb, "≥ 0")
        _require(isinstance(self.tp_comm_overlap, (int, float)) and 0.0 <= self.tp_comm_overlap <= 1.0,
                 "job.tp_comm_overlap", self.tp_comm_overlap, "a fraction between 0 (exposed) and 1 (hidden)")
        if self.max_tokens_per_rank is not None:
            _require(self.max_tokens_per_rank >= 1, "job.max_tokens_per_rank", self.max_tokens_per_rank,
                     "a positive integer")

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.pool

    @property
    def layers_per_stage(self) -> int:
        return self.model.layers // self.pp

    @property
    def heads_per_rank(self) -> int:
        return self.model.heads // self.tp

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads held by one TP rank (replicated when TP exceeds the KV-head count)."""
        return max(1, self.model.kv_heads // self.tp)

    def with_(self, **changes) -> JobSpec:
        return replace(self, **changes)
