"""The analytic cost model's prediction for one sequence on one layer, for one rank of its CP group.

Times are seconds per layer on one rank (a TP group of --tp GPUs, as in the simulator): attention and linear
compute (forward, backward) and the *exposed* CP communication of the chosen engine. FLOPs are per GPU. The
numbers are those the simulator uses: the command builds a one-layer job and calls the analytic model's
group_costs on a one-group batch; attention and linear compute are told apart by pricing the job once more
with the other kernel class made free (and no fixed costs); the fixed costs of the one-layer group operation
(per layer, per ring step, per microbatch: launches, norms, activation, dispatch; cost_models.fixed_costs)
are their own row, and the embedding (first stage) and LM head + loss (last stage) are reported apart.

Examples:
  dcpsim cost --gpu h100 --seq-len 32768 --heads 64 --kv-heads 4 --head-dim 128 --cp 1 --json
  dcpsim cost --model llama3-8b --seq-len 131072 --cp 8 --cp-engine hybrid --ulysses 4
  dcpsim cost --model llama3-70b --tp 8 --seq-len 65536 --cp 4 --calibration my_cluster.json
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace

import numpy as np

from dcpsim.cost_models import AnalyticCostModel, Calibration, GroupBatch, JobSpec, ModelSpec, get_model
from dcpsim.cost_models.gpu_files import resolve_gpu
from dcpsim.cost_models import flops as fl
from dcpsim.cost_models import kernels as memory_kernels
from dcpsim.cost_models.calibration import SaturatingCurve, default_calibration
from dcpsim.cost_models.head import embedding_compute_s, head_compute_s
from dcpsim.cost_models.memory import memory_breakdown
from dcpsim.cost_models.terms import CostTerms
from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.options import positive_int
from dcpsim.policies.engines import ulysses_degrees

NAME = "cost"
HELP = "the cost model's prediction for one sequence on one layer"
ORDER = 45
FREE = SaturatingCurve(math.inf, 0.0)  # a kernel that takes no time
DEFAULT_VOCAB = 128256  # only the LM head uses it; a one-layer cost never does


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seq-len", type=positive_int, required=True, help="sequence length in tokens")
    m = p.add_argument_group("model (a preset, or explicit sizes; explicit sizes override the preset)")
    m.add_argument("--model", help="model preset: llama3-8b, llama3-70b, tiny")
    m.add_argument("--heads", type=positive_int, help="query heads a")
    m.add_argument("--kv-heads", type=positive_int, help="key/value heads g (default: the preset's, else = heads)")
    m.add_argument("--head-dim", type=positive_int, help="head dimension d (default: the preset's, else 128)")
    m.add_argument("--hidden", type=positive_int, help="hidden size h (default: the preset's, else heads x head-dim)")
    m.add_argument("--ffn", type=positive_int,
                   help="SwiGLU intermediate size (default: the preset's, else 3.5 x hidden)")
    j = p.add_argument_group("parallelism and hardware")
    j.add_argument("--gpu", default="h100", metavar="PRESET|FILE",
                   help="GPU preset (a100, h100, h200, b200, gb200, mi300x) or a GPU .toml file (default h100)")
    j.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree (default 1)")
    j.add_argument("--cp", type=positive_int, default=1, help="CP degree c of the sequence's group (default 1)")
    j.add_argument("--cp-engine", choices=("ring", "ulysses", "hybrid"), default="ring",
                   help="CP engine (default ring)")
    j.add_argument("--ulysses", type=positive_int, help="inner Ulysses degree u of a hybrid engine (u divides c)")
    j.add_argument("--calibration", metavar="FILE", help="calibration JSON (default: the GPU's shipped one)")
    j.add_argument("--attention-backend", choices=("fa2", "fa3", "cudnn"),
                   help="attention kernels to price (default: TransformerEngine's pick on the GPU)")
    j.add_argument("--tp-comm-overlap", type=float, default=0.0, metavar="FRACTION",
                   help="fraction of the TP all-gathers / reduce-scatters hidden behind GEMMs (default 0: "
                        "exposed, as Megatron-LM without --tp-comm-overlap)")
    j.add_argument("--recompute", choices=("none", "selective", "full"), default="none",
                   help="activation recompute, Megatron-LM's --recompute-granularity (default none: Megatron-LM's "
                        "default); its re-run forward is a row, in the backward")
    mem = p.add_argument_group("memory (--memory: the whole model's per-GPU breakdown instead of one layer)")
    mem.add_argument("--memory", action="store_true",
                     help="print weights, gradients, optimizer shard, activations, transient buffers per stage "
                          "for microbatches of --seq-len tokens over --cp ranks (needs --model)")
    mem.add_argument("--pp", type=positive_int, default=1, help="pipeline stages (default 1)")
    mem.add_argument("--vpp", type=positive_int, default=1, help="virtual stages per pipeline rank (default 1)")
    mem.add_argument("--pool", type=positive_int, help="DP x CP ranks per stage (default --cp)")
    mem.add_argument("--grad-reduce-in-fp32", action=argparse.BooleanOptionalAction, default=True,
                     help="fp32 gradient buffers (default on, as Megatron-LM with --bf16)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def build_model(args: argparse.Namespace) -> ModelSpec:
    """The one-layer model of the command line: a preset with explicit sizes overriding it."""
    base = get_model(args.model) if args.model else None
    heads = args.heads or (base.heads if base else None)
    if heads is None:
        raise ScenarioError("give a model: --model PRESET or at least --heads (with --head-dim, --kv-heads)")
    head_dim = args.head_dim or (base.head_dim if base else 128)
    hidden = args.hidden or (base.hidden if base else heads * head_dim)
    ffn = args.ffn or (base.ffn if base else round(3.5 * hidden))
    kv_heads = args.kv_heads or (base.kv_heads if base else heads)
    if base is not None:  # keep what the sizes do not say: MoE layers (priced as a MoE layer), biases, mlp kind
        return replace(base, name=f"{base.name}-1-layer", hidden=hidden, ffn=ffn, layers=1, heads=heads,
                       kv_heads=kv_heads, head_dim=head_dim, dense_layers=())
    return ModelSpec(name=f"{base.name if base else 'custom'}-1-layer", hidden=hidden, ffn=ffn, layers=1,
                     heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     vocab=base.vocab if base else DEFAULT_VOCAB)


def _ulysses(args: argparse.Namespace, job: JobSpec) -> int:
    c = args.cp
    if args.ulysses is not None and args.cp_engine != "hybrid":
        raise ScenarioError(f"--ulysses is for --cp-engine hybrid, not {args.cp_engine}")
    u = {"ring": 1, "ulysses": c, "hybrid": args.ulysses}[args.cp_engine]
    if u is None:
        raise ScenarioError("--cp-engine hybrid needs --ulysses U (the inner all-to-all degree)")
    if u > 1 and u not in ulysses_degrees(c, job):
        raise ScenarioError(f"a Ulysses degree of {u} is invalid for a group of {c} ranks: it must divide "
                            f"the group size and the KV heads per TP rank ({job.kv_heads_per_rank}) and "
                            f"fit in an NVLink domain; valid: {', '.join(map(str, ulysses_degrees(c, job)))}")
    return u


def predict(args: argparse.Namespace) -> dict:
    """The prediction as a dict (what --json prints)."""
    model = build_model(args)
    gpu = resolve_gpu(args.gpu)
    L, c = args.seq_len, args.cp
    job = JobSpec(model=model, gpu=gpu, tp=args.tp, pp=1, pool=c, context_len=L, global_batch_tokens=L,
                  tp_comm_overlap=args.tp_comm_overlap, attention_backend=args.attention_backend,
                  recompute=args.recompute)
    u = _ulysses(args, job)
    cal = Calibration.load(args.calibration) if args.calibration else default_calibration(gpu)
    one = GroupBatch(seq_len=np.array([L], dtype=np.int64), seq_group=np.array([0], dtype=np.int64),
                     size=np.array([c], dtype=np.int64), ulysses=np.array([u], dtype=np.int64),
                     first_rank=np.array([0], dtype=np.int64))
    layer = replace(CostTerms(), lm_head=False)  # one layer: the ends of the pipeline are reported apart
    full = AnalyticCostModel(job, cal, layer).group_costs(one)
    layer = replace(layer, kernels=False)  # the rows below price attention and GEMMs alone; kernels: their own row
    no_rc = AnalyticCostModel(job, cal, replace(layer, recompute=False)).group_costs(one)
    recompute_bwd = float(AnalyticCostModel(job, cal, layer).group_costs(one).total_s[0] - no_rc.total_s[0])
    mem_f, mem_b = memory_kernels.stage_s(job, np.array([L / c]), 0) if CostTerms().kernels else (np.zeros(1), np.zeros(1))
    kernels = cal.without_fixed_costs()
    attn = AnalyticCostModel(job, replace(kernels, gemm=FREE), layer).group_costs(one)
    no_attn = replace(kernels, attn_fwd=FREE, attn_bwd=FREE)
    lin = AnalyticCostModel(job, no_attn, replace(layer, attention_backend=False)).group_costs(one)
    backend = AnalyticCostModel(job, cal, layer).attention_curves()[2]
    tpr = np.array([L / c])
    fixed_f, fixed_b = AnalyticCostModel(job, cal, layer).fixed_s(np.array([c / u]))
    emb_f, emb_b = embedding_compute_s(job, tpr)
    head_f, head_b = head_compute_s(job, cal, tpr)
    att_f = float(fl.attention_fwd_flops(L, model)) / args.tp / c
    lin_f = L / c * fl.linear_fwd_flops_per_token(model) / args.tp
    names = {"ring": f"ring({c})", "ulysses": f"ulysses({c})", "hybrid": f"hybrid({u},{c // u})"}
    engine = names[args.cp_engine]
    return {
        "seq_len": L, "gpu": gpu.name, "tp": args.tp, "cp": c, "engine": engine if c > 1 else "none",
        "calibration": cal.name, "attention_backend": backend,
        "model": {k: getattr(model, k) for k in ("hidden", "ffn", "heads", "kv_heads", "head_dim")},
        "attention_fwd_s": float(attn.fwd_compute_s[0]), "attention_bwd_s": float(attn.bwd_compute_s[0]),
        "linear_fwd_s": float(lin.fwd_compute_s[0]), "linear_bwd_s": float(lin.bwd_compute_s[0]),
        "overhead_fwd_s": float(np.asarray(fixed_f).reshape(-1)[0]),
        "overhead_bwd_s": float(np.asarray(fixed_b).reshape(-1)[0]),
        "cp_comm_fwd_s": float(full.fwd_comm_s[0]), "cp_comm_bwd_s": float(full.bwd_comm_s[0]),
        "tp_comm_fwd_s": float(np.asarray(full.fwd_tp_comm_s).reshape(-1)[0]),
        "tp_comm_bwd_s": float(np.asarray(full.bwd_tp_comm_s).reshape(-1)[0]),
        "total_s": float(full.total_s[0]), "recompute": args.recompute, "recompute_bwd_s": recompute_bwd,
        "memory_kernels_fwd_s": float(mem_f[0]), "memory_kernels_bwd_s": float(mem_b[0]),
        "embedding_fwd_s": float(emb_f[0]), "embedding_bwd_s": float(emb_b[0]),
        "lm_head_loss_fwd_s": float(head_f[0]), "lm_head_loss_bwd_s": float(head_b[0]),
        "flops": {"attention_fwd": att_f, "attention_bwd": fl.ATTENTION_BWD_FACTOR * att_f,
                  "linear_fwd": lin_f, "linear_bwd": fl.LINEAR_BWD_FACTOR * lin_f},
    }


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.report import format_table  # pandas: loaded only when run

    if args.memory:
        return _print_memory(args, format_table)
    r = predict(args)
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return 0
    m = r["model"]
    print(f"one layer, one rank: L = {r['seq_len']:,} tokens on {r['gpu']}, TP{r['tp']}, CP{r['cp']} "
          f"engine {r['engine']}; h {m['hidden']}, ffn {m['ffn']}, heads {m['heads']}/{m['kv_heads']} KV, "
          f"d {m['head_dim']}; calibration {r['calibration']}; attention {r['attention_backend']}")
    ms = lambda s: f"{s * 1e3:.4g}"
    tf = lambda n, s: f"{n / s / 1e12:.0f}" if s > 0 else "-"
    fp = r["flops"]
    rows = [["attention", ms(r["attention_fwd_s"]), ms(r["attention_bwd_s"]),
             tf(fp["attention_fwd"], r["attention_fwd_s"]), tf(fp["attention_bwd"], r["attention_bwd_s"])],
            ["linear", ms(r["linear_fwd_s"]), ms(r["linear_bwd_s"]), tf(fp["linear_fwd"], r["linear_fwd_s"]),
             tf(fp["linear_bwd"], r["linear_bwd_s"])],
            ["fixed costs (layer, ring steps, microbatch)", ms(r["overhead_fwd_s"]), ms(r["overhead_bwd_s"]), "", ""],
            ["CP comm (exposed)", ms(r["cp_comm_fwd_s"]), ms(r["cp_comm_bwd_s"]), "", ""],
            ["TP comm (exposed)", ms(r["tp_comm_fwd_s"]), ms(r["tp_comm_bwd_s"]), "", ""],
            ["memory-bound kernels (norms, RoPE, activation, residual)", ms(r["memory_kernels_fwd_s"]),
             ms(r["memory_kernels_bwd_s"]), "", ""],
            [f"recompute {r['recompute']} (re-run forward)", "0", ms(r["recompute_bwd_s"]), "", ""]]
    fwd = (r["attention_fwd_s"] + r["linear_fwd_s"] + r["overhead_fwd_s"] + r["cp_comm_fwd_s"]
           + r["tp_comm_fwd_s"] + r["memory_kernels_fwd_s"])
    rows.append(["total (one layer)", ms(fwd), ms(r["total_s"] - fwd), "", ""])
    rows.append(["first stage: embedding", ms(r["embedding_fwd_s"]), ms(r["embedding_bwd_s"]), "", ""])
    rows.append(["last stage: LM head + loss", ms(r["lm_head_loss_fwd_s"]), ms(r["lm_head_loss_bwd_s"]), "", ""])
    print(format_table(rows, ["term", "fwd ms", "bwd ms", "fwd TFLOP/s", "bwd TFLOP/s"]))
    return 0


def memory(args: argparse.Namespace) -> list[dict]:
    """Per stage, one GPU's memory (cost_models.memory.memory_breakdown) of the whole --model."""
    if not args.model:
        raise ScenarioError("--memory needs --model PRESET (the whole model's parameters)")
    job = JobSpec(model=get_model(args.model), gpu=resolve_gpu(args.gpu), tp=args.tp, pp=args.pp, vpp=args.vpp,
                  pool=args.pool or args.cp, context_len=args.seq_len, recompute=args.recompute,
                  grad_reduce_in_fp32=args.grad_reduce_in_fp32)
    return [memory_breakdown(job, s, args.seq_len / args.cp, cp=args.cp > 1).to_dict() for s in range(job.pp)]


def _print_memory(args: argparse.Namespace, format_table) -> int:
    parts = memory(args)
    if args.json:
        print(json.dumps(parts, sort_keys=True))
        return 0
    cols = ["weights_gb", "gradients_gb", "optimizer_gb", "activations_gb", "transient_gb", "reserve_gb",
            "step_copy_gb", "total_gb"]
    print(f"per GPU, GB: {args.model} on {args.gpu}, TP{args.tp} PP{args.pp} VP{args.vpp} pool "
          f"{args.pool or args.cp}, {args.seq_len:,} tokens per microbatch over CP{args.cp}, recompute "
          f"{args.recompute} (step copy: not alive with the activations; total counts the larger)")
    rows = [[str(p["stage"])] + [f"{p[c]:.2f}" for c in cols] for p in parts]
    print(format_table(rows, ["stage"] + [c[:-3] for c in cols]))
    return 0
