"""A model as the simulator sees it: the resolved spec, its parameter counts and its linear FLOPs.

MODEL is a preset name, a Hugging Face config.json or a model TOML file (docs/models.md). Printed: every
field of the spec and where it comes from, params_total (every weight, as a checkpoint counts them: matrices,
biases, norms), params_active (what one token uses: k of the E routed experts of each MoE layer; embedding
and output head included), the parameters of each kind of layer, and the linear FLOPs per token per layer
(forward: 2 per weight a token uses; backward twice that), i.e. what cost_models.flops charges.

Examples:
  dcpsim model --list
  dcpsim model qwen3-30b-a3b
  dcpsim model path/to/Mixtral-8x7B-v0.1/config.json --json
"""

from __future__ import annotations

import argparse

from dcpsim.experiments.output.write import dumps_json

NAME = "model"
HELP = "show a model (preset, config.json or TOML): spec, parameter counts, FLOPs per token"
ORDER = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", metavar="MODEL", help="a preset name, a config.json or a model .toml")
    p.add_argument(
        "--list", action="store_true", help="list the presets with their parameter counts and sources"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _b(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def run(args: argparse.Namespace) -> int:
    from dcpsim.cost_models import get_model
    from dcpsim.cost_models.presets import MODELS
    from dcpsim.experiments.inspection.model_summary import COUNT_SOURCES, describe

    if args.list or not args.model:
        rows = {n: describe(m) for n, m in MODELS.items()}
        if args.json:
            print(dumps_json(rows, "--json", sort_keys=True))
            return 0
        for n, d in rows.items():
            print(
                f"{n:<15} total {_b(d['params_total']):>8}  active {_b(d['params_active']):>8}  {d['source']}"
            )
        return 0
    d = describe(get_model(args.model))
    if args.json:
        print(dumps_json(d, "--json", sort_keys=True))
        return 0
    s = d["spec"]
    print(f"model {d['name']}  ({d['source'] or 'no source given'})")
    moe = (
        (
            f", MoE: {s['experts']} experts, top {s['experts_per_token']}, expert FFN {s['expert_ffn']}"
            + (f", shared expert FFN {s['shared_expert_ffn']}" if s["shared_expert_ffn"] else "")
            + f", {d['layers']['moe']} MoE / {d['layers']['dense']} dense layers"
        )
        if s["experts"]
        else ""
    )
    print(
        f"  hidden {s['hidden']}, {s['layers']} layers, {s['heads']} heads / {s['kv_heads']} KV heads of "
        f"{s['head_dim']}, {s['mlp']} FFN {s['ffn']}, vocab {s['vocab']}{moe}"
    )
    flags = [k for k in ("tied_embeddings", "qkv_bias", "o_bias", "qk_norm", "shared_expert_gate") if s[k]]
    print(f"  flags: {', '.join(flags) or 'none'}")
    print(f"  params_total  {d['params_total']:>16,}  ({_b(d['params_total'])})")
    print(f"  params_active {d['params_active']:>16,}  ({_b(d['params_active'])})  per token")
    print(f"  embedding     {d['params_embedding']:>16,}  ({COUNT_SOURCES['embedding']})")
    print("  per layer:")
    for k, v in d["params_per_layer"].items():
        src = COUNT_SOURCES.get(k, "")
        print(f"    {k:<18} {v:>14,}  {src}")
    f = d["linear_fwd_flops_per_token_layer"]
    print(
        f"  linear FLOPs per token per layer, forward: {f:,.0f} ({f / 1e9:.3f} GFLOP; backward 2x); "
        f"all layers: {d['linear_fwd_flops_per_token'] / 1e9:.2f} GFLOP"
    )
    print(f"    = {COUNT_SOURCES['linear_fwd_flops_per_token_layer']}")
    return 0
