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

from dcpsim.experiments.cli.args import add_split_arguments, positive_int
from dcpsim.experiments.output.write import dumps_json

NAME = "cost"
HELP = "the cost model's prediction for one sequence on one layer"
ORDER = 45


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
    e = p.add_argument_group("MoE layout (a MoE preset such as qwen3-30b-a3b; cost_models.moe)")
    e.add_argument("--ep", type=positive_int, default=1,
                   help="expert-parallel degree, carved from --pool (default 1)")
    e.add_argument("--etp", type=positive_int,
                   help="expert-tensor-parallel degree, Megatron's --expert-tensor-parallel-size; ETP x EP must "
                        "divide TP x pool (default: = --tp, Megatron's default)")
    e.add_argument("--moe-dispatcher", choices=("alltoall", "flex"), default="alltoall",
                   help="MoE token dispatcher: alltoall (every routed copy) or flex (DeepEP: one copy per "
                        "destination node across the network; default alltoall)")
    mem = p.add_argument_group("memory (--memory: the whole model's per-GPU breakdown instead of one layer)")
    mem.add_argument("--memory", action="store_true",
                     help="print weights, gradients, optimizer shard, activations, transient buffers per stage "
                          "for microbatches of --seq-len tokens over --cp ranks (needs --model)")
    mem.add_argument("--pp", type=positive_int, default=1, help="pipeline stages (default 1)")
    mem.add_argument("--vpp", type=positive_int, default=1, help="virtual stages per pipeline rank (default 1)")
    mem.add_argument("--pool", type=positive_int, help="DP x CP ranks per stage (default --cp)")
    mem.add_argument("--grad-reduce-in-fp32", action=argparse.BooleanOptionalAction, default=True,
                     help="fp32 gradient buffers (default on, as Megatron-LM with --bf16)")
    add_split_arguments(mem)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def run(args: argparse.Namespace) -> int:
    from dcpsim.experiments.inspection.layer_cost import LayerQuery, predict
    from dcpsim.experiments.output.tables import format_table  # pandas: loaded only when run

    if args.memory:
        return _print_memory(args, format_table)
    r = predict(LayerQuery.from_args(args))
    if args.json:
        print(dumps_json(r, "--json", sort_keys=True))
        return 0
    m = r["model"]
    print(f"one layer, one rank: L = {r['seq_len']:,} tokens on {r['gpu']}, TP{r['tp']}, CP{r['cp']} "
          f"engine {r['engine']}; h {m['hidden']}, ffn {m['ffn']}, heads {m['heads']}/{m['kv_heads']} KV, "
          f"d {m['head_dim']}; calibration {r['calibration']}; attention {r['attention_backend']}"
          + (f"; EP{r['ep']} ETP{r['etp']} dispatcher {r['moe_dispatcher']}"
             if r["ep"] > 1 or r["ep_comm_fwd_s"] else ""))
    ms = lambda s: f"{s * 1e3:.4g}"
    tf = lambda n, s: f"{n / s / 1e12:.0f}" if s > 0 else "-"
    fp = r["flops"]
    rows = [["attention", ms(r["attention_fwd_s"]), ms(r["attention_bwd_s"]),
             tf(fp["attention_fwd"], r["attention_fwd_s"]), tf(fp["attention_bwd"], r["attention_bwd_s"])],
            [f"linear (GEMMs: {r['gemm_pricing']})", ms(r["linear_fwd_s"]), ms(r["linear_bwd_s"]),
             tf(fp["linear_fwd"], r["linear_fwd_s"]),
             tf(fp["linear_bwd"], r["linear_bwd_s"])],
            ["fixed costs (layer, ring steps, microbatch)", ms(r["overhead_fwd_s"]), ms(r["overhead_bwd_s"]), "", ""],
            ["CP comm (exposed)", ms(r["cp_comm_fwd_s"]), ms(r["cp_comm_bwd_s"]), "", ""],
            ["TP comm (exposed)", ms(r["tp_comm_fwd_s"]), ms(r["tp_comm_bwd_s"]), "", ""],
            ["EP dispatch + combine (MoE, exposed)", ms(r["ep_comm_fwd_s"]), ms(r["ep_comm_bwd_s"]), "", ""],
            ["memory-bound kernels (norms, RoPE, activation, residual)", ms(r["memory_kernels_fwd_s"]),
             ms(r["memory_kernels_bwd_s"]), "", ""],
            [f"recompute {r['recompute']} (re-run forward)", "0", ms(r["recompute_bwd_s"]), "", ""]]
    fwd = (r["attention_fwd_s"] + r["linear_fwd_s"] + r["overhead_fwd_s"] + r["cp_comm_fwd_s"]
           + r["tp_comm_fwd_s"] + r["ep_comm_fwd_s"] + r["memory_kernels_fwd_s"])
    rows.append(["total (one layer)", ms(fwd), ms(r["total_s"] - fwd), "", ""])
    rows.append(["first stage: embedding", ms(r["embedding_fwd_s"]), ms(r["embedding_bwd_s"]), "", ""])
    rows.append(["last stage: LM head + loss", ms(r["lm_head_loss_fwd_s"]), ms(r["lm_head_loss_bwd_s"]), "", ""])
    print(format_table(rows, ["term", "fwd ms", "bwd ms", "fwd TFLOP/s", "bwd TFLOP/s"]))
    return 0


def _moe_layout(args: argparse.Namespace) -> str:
    """", EP8 ETP1" where the layout has expert parallelism (ETP unset: = TP, Megatron-LM's default)."""
    return f", EP{args.ep} ETP{args.etp or args.tp}" if args.ep > 1 or args.etp else ""


def _print_memory(args: argparse.Namespace, format_table) -> int:
    from dcpsim.experiments.inspection.layer_cost import MemoryQuery, memory

    parts = memory(MemoryQuery.from_args(args))
    if args.json:
        print(dumps_json(parts, "--json", sort_keys=True))
        return 0
    cols = ["weights_gb", "gradients_gb", "optimizer_gb", "activations_gb", "transient_gb", "reserve_gb",
            "step_copy_gb", "total_gb"]
    print(f"per GPU, GB: {args.model} on {args.gpu}, TP{args.tp} PP{args.pp} VP{args.vpp} pool "
          f"{args.pool or args.cp}{_moe_layout(args)}, {args.seq_len:,} tokens per microbatch over CP{args.cp}, "
          f"recompute {args.recompute} (step copy: not alive with the activations; total counts the larger)")
    rows = [[str(p["stage"]), _layers(p)] + [f"{p[c]:.2f}" for c in cols] for p in parts]
    print(format_table(rows, ["stage", "layers"] + [c[:-3] for c in cols]))
    return 0


def _layers(part: dict) -> str:
    """A stage's transformer layers, with its model chunks' when it has several: '15 = 1+2+2+…'."""
    chunks = part["chunk_layers"]
    return str(part["layers"]) if len(chunks) == 1 else f"{part['layers']} = {'+'.join(map(str, chunks))}"
