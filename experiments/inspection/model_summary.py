"""What ``dcpsim model`` reports about a model: its spec, parameter counts per part and per layer, linear
FLOPs per token (:func:`describe`), and where each count comes from (``COUNT_SOURCES``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from dcpsim.cost_models import ModelSpec
from dcpsim.cost_models.flops import linear_fwd_flops_per_token

COUNT_SOURCES = {
    "attention": "h·a·d (Q) + 2·h·g·d (K, V) + a·d·h (O), plus biases: a·d + 2·g·d if qkv_bias, h if o_bias",
    "dense_mlp": "3·h·f (SwiGLU: gate, up, down) or 2·h·f (GELU: up, down)",
    "router": "h·E (the gate GEMM, no bias)",
    "expert": "3·h·f_e per routed expert (SwiGLU; GELU: 2·h·f_e)",
    "shared_expert": "3·h·f_s, plus h for its sigmoid gate (Qwen2-MoE)",
    "experts_all": "E × expert",
    "moe_layer_total": "attention + router + E experts + shared expert + norms",
    "moe_layer_active": "attention + router + k experts + shared expert + norms (what one token uses)",
    "dense_layer_total": "attention + dense_mlp + norms",
    "norms": "2·h per layer (two RMSNorms), plus 2·d with Q/K norms (Qwen3); a final h",
    "embedding": "V·h input embedding, plus V·h output head unless tied",
    "linear_fwd_flops_per_token_layer": "2 × the matrix weights one token uses per layer (norms not "
    "counted), mean over layers (cost_models.flops.linear_fwd_flops_per_token)",
}


def describe(m: ModelSpec) -> dict[str, Any]:
    """Everything ``dcpsim model`` reports about ``m`` (plain JSON types)."""
    spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(m).items()}
    layers: dict[str, Any] = {"dense": m.layers - m.moe_layers, "moe": m.moe_layers}
    per_layer: dict[str, Any] = {"attention": m.attn_params, "norms": m.norm_params_per_layer}
    if m.layers - m.moe_layers:
        per_layer["dense_mlp"] = m.dense_mlp_params
        per_layer["dense_layer_total"] = m.attn_params + m.dense_mlp_params + m.norm_params_per_layer
    if m.moe_layers:  # a MoE model may list every layer as dense: then it has no MoE layer to describe
        moe_layer = next(i for i in range(m.layers) if m.is_moe_layer(i))
        per_layer.update(
            router=m.router_params,
            expert=m.expert_params,
            experts_all=m.experts * m.expert_params,
            **({"shared_expert": m.shared_expert_params} if m.shared_expert_ffn else {}),
            moe_layer_total=m.layer_params(moe_layer) + m.norm_params_per_layer,
            moe_layer_active=m.layer_params(moe_layer, active=True) + m.norm_params_per_layer,
        )
    return {
        "name": m.name,
        "source": m.source,
        "spec": spec,
        "layers": layers,
        "params_total": m.params_total,
        "params_active": m.params_active,
        "params_embedding": m.embedding_params,
        "params_per_layer": per_layer,
        "linear_fwd_flops_per_token_layer": linear_fwd_flops_per_token(m),
        "linear_fwd_flops_per_token": linear_fwd_flops_per_token(m) * m.layers,
        "count_sources": COUNT_SOURCES,
    }
