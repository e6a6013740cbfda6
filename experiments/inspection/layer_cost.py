"""The analytic cost model's prediction for one sequence on one layer, for one rank of its CP group
(:func:`predict`, ``dcpsim cost``; what the numbers are: ``dcpsim cost --help``, experiments/cli/cost.py)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields, replace

import numpy as np

from dcpsim.cost_models import AnalyticCostModel, Calibration, GroupBatch, JobSpec, ModelSpec, get_model
from dcpsim.cost_models import flops as fl
from dcpsim.cost_models import kernels as memory_kernels
from dcpsim.cost_models.calibration import SaturatingCurve, default_calibration
from dcpsim.cost_models.gpu_files import resolve_gpu
from dcpsim.cost_models.head import embedding_compute_s, head_compute_s
from dcpsim.cost_models.memory import memory_breakdown
from dcpsim.cost_models.terms import CostTerms
from dcpsim.experiments.errors import ScenarioError
from dcpsim.policies.engines import ulysses_degrees

FREE = SaturatingCurve(math.inf, 0.0)  # a kernel that takes no time
DEFAULT_VOCAB = 128256  # only the LM head uses it; a one-layer cost never does


@dataclass(frozen=True)
class LayerQuery:
    """One sequence on one layer: the options of ``dcpsim cost`` (their defaults)."""

    seq_len: int
    model: str | None = None  # a preset; explicit sizes below override it
    heads: int | None = None
    kv_heads: int | None = None  # default: the preset's, else = heads
    head_dim: int | None = None  # default: the preset's, else 128
    hidden: int | None = None  # default: the preset's, else heads x head_dim
    ffn: int | None = None  # default: the preset's, else 3.5 x hidden
    gpu: str = "h100"  # a preset or a GPU .toml file
    tp: int = 1
    cp: int = 1  # CP degree of the sequence's group
    cp_engine: str = "ring"  # ring, ulysses or hybrid
    ulysses: int | None = None  # the inner Ulysses degree of a hybrid engine
    calibration: str | None = None  # a calibration JSON; default: the GPU's shipped one
    attention_backend: str | None = None  # fa2, fa3, cudnn; default: TransformerEngine's pick on the GPU
    tp_comm_overlap: float = 0.0
    recompute: str = "none"  # Megatron-LM's --recompute-granularity: none, selective, full
    pool: int | None = None  # DP x CP ranks of the stage (default: cp); EP groups are carved from them
    ep: int = 1  # expert-parallel degree (a MoE model)
    etp: int | None = None  # expert-tensor-parallel degree (default: tp, Megatron's)
    moe_dispatcher: str = "alltoall"  # alltoall or flex (cost_models.moe)

    @staticmethod
    def from_args(args: argparse.Namespace) -> LayerQuery:
        """The query of a parsed ``dcpsim cost`` command line."""
        return LayerQuery(**{f.name: getattr(args, f.name) for f in fields(LayerQuery)})


def build_model(query: LayerQuery) -> ModelSpec:
    """The one-layer model of the command line: a preset with explicit sizes overriding it."""
    base = get_model(query.model) if query.model else None
    heads = query.heads or (base.heads if base else None)
    if heads is None:
        raise ScenarioError("give a model: --model PRESET or at least --heads (with --head-dim, --kv-heads)")
    head_dim = query.head_dim or (base.head_dim if base else 128)
    hidden = query.hidden or (base.hidden if base else heads * head_dim)
    ffn = query.ffn or (base.ffn if base else round(3.5 * hidden))
    kv_heads = query.kv_heads or (base.kv_heads if base else heads)
    if base is not None:  # keep what the sizes do not say: MoE layers (priced as a MoE layer), biases, mlp kind
        return replace(base, name=f"{base.name}-1-layer", hidden=hidden, ffn=ffn, layers=1, heads=heads,
                       kv_heads=kv_heads, head_dim=head_dim, dense_layers=())
    return ModelSpec(name=f"{base.name if base else 'custom'}-1-layer", hidden=hidden, ffn=ffn, layers=1,
                     heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     vocab=base.vocab if base else DEFAULT_VOCAB)


def _ulysses(query: LayerQuery, job: JobSpec) -> int:
    c = query.cp
    if query.ulysses is not None and query.cp_engine != "hybrid":
        raise ScenarioError(f"--ulysses is for --cp-engine hybrid, not {query.cp_engine}")
    u = {"ring": 1, "ulysses": c, "hybrid": query.ulysses}[query.cp_engine]
    if u is None:
        raise ScenarioError("--cp-engine hybrid needs --ulysses U (the inner all-to-all degree)")
    if u > 1 and u not in ulysses_degrees(c, job):
        raise ScenarioError(f"a Ulysses degree of {u} is invalid for a group of {c} ranks: it must divide "
                            f"the group size and the KV heads per TP rank ({job.kv_heads_per_rank}) and "
                            f"fit in an NVLink domain; valid: {', '.join(map(str, ulysses_degrees(c, job)))}")
    return u


def predict(query: LayerQuery) -> dict:
    """The prediction as a dict (what --json prints)."""
    model = build_model(query)
    gpu = resolve_gpu(query.gpu)
    L, c = query.seq_len, query.cp
    if c > L:
        raise ScenarioError(f"--cp {c:,} over --seq-len {L:,} leaves {L / c:.2g} tokens per rank; expected --cp at "
                            f"most --seq-len = {L:,} (every CP rank holds at least one token)")
    job = JobSpec(model=model, gpu=gpu, tp=query.tp, pp=1, pool=query.pool or c, context_len=L,
                  global_batch_tokens=L, tp_comm_overlap=query.tp_comm_overlap,
                  attention_backend=query.attention_backend, recompute=query.recompute, ep=query.ep, etp=query.etp,
                  moe_dispatcher=query.moe_dispatcher)
    u = _ulysses(query, job)
    cal = Calibration.load(query.calibration) if query.calibration else default_calibration(gpu)
    one = GroupBatch(seq_len=np.array([L], dtype=np.int64), seq_group=np.array([0], dtype=np.int64),
                     size=np.array([c], dtype=np.int64), ulysses=np.array([u], dtype=np.int64),
                     first_rank=np.array([0], dtype=np.int64))
    layer = replace(CostTerms(), lm_head=False)  # one layer: the ends of the pipeline are reported apart
    full = AnalyticCostModel(job, cal, layer).group_costs(one)
    layer = replace(layer, kernels=False)  # the rows below price attention and GEMMs alone; kernels: their own row
    no_rc = AnalyticCostModel(job, cal, replace(layer, recompute=False)).group_costs(one)
    recompute_bwd = float(AnalyticCostModel(job, cal, layer).group_costs(one).total_s[0] - no_rc.total_s[0])
    mem_f, mem_b = (memory_kernels.stage_s(job, np.array([L / c]), 0) if CostTerms().kernels
                    else (np.zeros(1), np.zeros(1)))
    kernels = cal.without_fixed_costs()
    attn = AnalyticCostModel(job, replace(kernels, gemm=FREE), layer).group_costs(one)
    no_attn = replace(kernels, attn_fwd=FREE, attn_bwd=FREE)
    lin = AnalyticCostModel(job, no_attn, replace(layer, attention_backend=False)).group_costs(one)
    backend = AnalyticCostModel(job, cal, layer).attention_curves()[2]
    tpr = np.array([L / c])
    fixed_f, fixed_b = AnalyticCostModel(job, cal, layer).fixed_s(np.array([c / u]))
    emb_f, emb_b = embedding_compute_s(job, tpr)
    head_f, head_b = head_compute_s(job, cal, tpr)
    att_f = float(fl.attention_fwd_flops(L, model)) / query.tp / c
    lin_f = L / c * fl.linear_fwd_flops_per_token(model) / query.tp
    names = {"ring": f"ring({c})", "ulysses": f"ulysses({c})", "hybrid": f"hybrid({u},{c // u})"}
    engine = names[query.cp_engine]
    return {
        "seq_len": L, "gpu": gpu.name, "tp": query.tp, "cp": c, "engine": engine if c > 1 else "none",
        "calibration": cal.name, "attention_backend": backend,
        "gemm_pricing": (f"shapes, {cal.gemm.peak_tflops:g} TFLOP/s + traffic at {gpu.hbm_bw_gbs:g} GB/s"
                         if layer.gemm_shapes else f"token curve (peak {cal.gemm.peak_tflops:g} TFLOP/s, "
                         f"half {cal.gemm.half:g} tokens)"),
        "model": {k: getattr(model, k) for k in ("hidden", "ffn", "heads", "kv_heads", "head_dim")},
        "attention_fwd_s": float(attn.fwd_compute_s[0]), "attention_bwd_s": float(attn.bwd_compute_s[0]),
        "linear_fwd_s": float(lin.fwd_compute_s[0]), "linear_bwd_s": float(lin.bwd_compute_s[0]),
        "overhead_fwd_s": float(np.asarray(fixed_f).reshape(-1)[0]),
        "overhead_bwd_s": float(np.asarray(fixed_b).reshape(-1)[0]),
        "cp_comm_fwd_s": float(full.fwd_comm_s[0]), "cp_comm_bwd_s": float(full.bwd_comm_s[0]),
        "tp_comm_fwd_s": float(np.asarray(full.fwd_tp_comm_s).reshape(-1)[0]),
        "tp_comm_bwd_s": float(np.asarray(full.bwd_tp_comm_s).reshape(-1)[0]),
        "ep": job.ep, "etp": job.expert_tp, "moe_dispatcher": job.moe_dispatcher,
        "ep_comm_fwd_s": float(np.asarray(full.fwd_ep_comm_s).reshape(-1)[0]),
        "ep_comm_bwd_s": float(np.asarray(full.bwd_ep_comm_s).reshape(-1)[0]),
        "total_s": float(full.total_s[0]), "recompute": query.recompute, "recompute_bwd_s": recompute_bwd,
        "memory_kernels_fwd_s": float(mem_f[0]), "memory_kernels_bwd_s": float(mem_b[0]),
        "embedding_fwd_s": float(emb_f[0]), "embedding_bwd_s": float(emb_b[0]),
        "lm_head_loss_fwd_s": float(head_f[0]), "lm_head_loss_bwd_s": float(head_b[0]),
        "flops": {"attention_fwd": att_f, "attention_bwd": fl.ATTENTION_BWD_FACTOR * att_f,
                  "linear_fwd": lin_f, "linear_bwd": fl.LINEAR_BWD_FACTOR * lin_f},
    }


@dataclass(frozen=True)
class MemoryQuery:
    """``dcpsim cost --memory``: one GPU's memory of the whole model, per pipeline stage."""

    model: str | None
    seq_len: int
    gpu: str = "h100"
    tp: int = 1
    cp: int = 1
    pp: int = 1
    vpp: int = 1
    pool: int | None = None  # DP x CP ranks per stage (default: cp)
    recompute: str = "none"
    grad_reduce_in_fp32: bool = True
    ep: int = 1  # expert-parallel degree (a MoE model's routed experts sharded over ETP · EP GPUs)
    etp: int | None = None  # expert-tensor-parallel degree (None: = tp, Megatron-LM's default)
    account_for_embedding_in_pipeline_split: bool | None = None  # None: off (the flag's argparse default)
    account_for_loss_in_pipeline_split: bool | None = None
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None

    @staticmethod
    def from_args(args: argparse.Namespace) -> MemoryQuery:
        return MemoryQuery(**{f.name: getattr(args, f.name) for f in fields(MemoryQuery)})


def memory(query: MemoryQuery) -> list[dict]:
    """Per stage, one GPU's memory (cost_models.memory.memory_breakdown) of the whole ``query.model``, with the
    stage's transformer layers (``layers``) and those of each of its model chunks (``chunk_layers``)."""
    if not query.model:
        raise ScenarioError("--memory needs --model PRESET (the whole model's parameters)")
    job = JobSpec(model=get_model(query.model), gpu=resolve_gpu(query.gpu), tp=query.tp, pp=query.pp,
                  vpp=query.vpp, pool=query.pool or query.cp, context_len=query.seq_len, recompute=query.recompute,
                  grad_reduce_in_fp32=query.grad_reduce_in_fp32, ep=query.ep, etp=query.etp,
                  account_for_embedding_in_pipeline_split=bool(query.account_for_embedding_in_pipeline_split),
                  account_for_loss_in_pipeline_split=bool(query.account_for_loss_in_pipeline_split),
                  num_layers_in_first_pipeline_stage=query.num_layers_in_first_pipeline_stage,
                  num_layers_in_last_pipeline_stage=query.num_layers_in_last_pipeline_stage)
    return [{**memory_breakdown(job, s, query.seq_len / query.cp, cp=query.cp > 1).to_dict(),
             "layers": job.stage_layers(s), "chunk_layers": list(job.split[s])} for s in range(job.pp)]
