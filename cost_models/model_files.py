"""Models from files: a Hugging Face ``config.json`` or a TOML file with the fields of :class:`ModelSpec`.

``cost_models.presets.get_model(text)`` is what ``--model`` and the scenario field ``model`` go through: a
preset name, else :func:`model_from_path`: a path ending in ``.json`` (a Hugging Face config) or in ``.toml``,
or a folder holding a ``config.json`` (a downloaded Hugging Face model).

Hugging Face families (``model_type``, else the first of ``architectures``) and what is read, following each
family's modelling code in transformers (``models/<family>/modeling_<family>.py``):

==============  ===========================================================================================
llama, mistral  dense SwiGLU; ``attention_bias`` puts biases on Q, K, V and O (Llama); Mistral: none
qwen2           dense SwiGLU, biases on Q, K, V (always: Qwen2Attention builds them with ``bias=True``)
qwen3           dense SwiGLU, per-head RMSNorm on queries and keys; ``attention_bias`` on Q, K, V, O
mixtral         every layer MoE: ``num_local_experts`` experts of ``intermediate_size``, top
                ``num_experts_per_tok``; router h × E without bias
qwen2_moe       MoE where ``(layer + 1) % decoder_sparse_step == 0`` and layer ∉ ``mlp_only_layers``
                (others dense, ``intermediate_size``); experts of ``moe_intermediate_size``; a shared
                expert of ``shared_expert_intermediate_size`` with a sigmoid gate (h weights); Q, K, V bias
qwen3_moe       as qwen2_moe without a shared expert; Q/K norms; ``attention_bias`` on Q, K, V, O
==============  ===========================================================================================

Common fields: ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads`` (absent: equal to the heads, as transformers defaults it), ``head_dim`` (absent:
hidden / heads), ``vocab_size``, ``tie_word_embeddings`` (absent: false), ``hidden_act`` (silu / swish: the
SwiGLU these families use). Other keys (RoPE, dtypes, token ids, ...) do not change the cost and are ignored.
Refused with one line: an unknown family, a missing or mistyped field, sliding-window attention in use
(priced as full causal attention would be wrong), ``mlp_bias``, and whatever :class:`ModelSpec` rejects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.specs import ModelSpec
from dcpsim.userfile import check_number, load_json, load_toml

DENSE_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe")
FAMILIES = DENSE_FAMILIES + MOE_FAMILIES
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
# ModelSpec field -> the config.json key it is read from (for error messages).
HF_KEYS = {
    "hidden": "hidden_size",
    "ffn": "intermediate_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "vocab": "vocab_size",
    "experts": "num_experts",
    "experts_per_token": "num_experts_per_tok",
    "expert_ffn": "moe_intermediate_size",
    "shared_expert_ffn": "shared_expert_intermediate_size",
    "dense_layers": "mlp_only_layers",
}
_TOML_INT = (
    "hidden",
    "ffn",
    "layers",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "experts",
    "experts_per_token",
    "expert_ffn",
    "shared_expert_ffn",
)
_TOML_BOOL = ("tied_embeddings", "qkv_bias", "o_bias", "qk_norm", "shared_expert_gate")
_TOML_STR = ("name", "mlp", "source")
TOML_KEYS = _TOML_STR + _TOML_INT + _TOML_BOOL + ("dense_layers",)
TOML_REQUIRED = ("hidden", "ffn", "layers", "heads", "vocab")


def model_dir_config(text: str) -> Path | None:
    """``text/config.json`` when ``text`` is a folder holding one (a downloaded Hugging Face model)."""
    p = Path(str(text)) / "config.json"
    return p if p.is_file() else None


def is_model_file(text: str) -> bool:
    return Path(str(text)).suffix.lower() in (".json", ".toml")


def model_from_path(text: str) -> ModelSpec | None:
    """The model of a model file (``.json``, ``.toml``) or of a Hugging Face model folder ``text``; None when
    ``text`` names neither (then it can only be a preset name)."""
    if is_model_file(text):
        return load_model_file(text)
    config = model_dir_config(text)
    return None if config is None else load_model_file(config)


def load_model_file(path: str | Path) -> ModelSpec:
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise SpecError(f"{p}: a model file must end in .json (Hugging Face config) or .toml (model spec)")
    if suffix == ".json":
        data = load_json(p, "model file (Hugging Face config.json)", error=SpecError)
        if not isinstance(data, dict):
            raise SpecError(f"{p}: a config.json must hold one JSON object, got {type(data).__name__}")
        return from_hf_config(data, str(p))
    return from_toml_mapping(load_toml(p, "model file (TOML model spec)", error=SpecError), str(p))


# ---- Hugging Face config.json ----------------------------------------------------------------------------
def _family(cfg: dict[str, Any], origin: str) -> str:
    mt = cfg.get("model_type")
    if mt is None:
        archs = cfg.get("architectures") or []
        mt = _ARCHITECTURES.get(archs[0]) if isinstance(archs, list) and archs and isinstance(archs[0], str) \
            else None
        if mt is None:
            raise SpecError(
                f"{origin}: no 'model_type' and no known 'architectures' entry ({archs!r}); "
                f"valid model_type: {', '.join(FAMILIES)}"
            )
    if not isinstance(mt, str) or mt not in FAMILIES:
        raise SpecError(f"{origin}: model_type = {mt!r} is not supported; valid: {', '.join(FAMILIES)}")
    return mt


def _int(cfg: dict[str, Any], key: str, origin: str, default: int | None = None, minimum: int = 1) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise SpecError(f"{origin}: field {key!r} is missing; expected an integer ≥ {minimum}")
    return int(check_number(v, f"{origin}: field {key!r}", integer=True, ge=minimum, error=SpecError))


def _bool(cfg: dict[str, Any], key: str, origin: str, default: bool = False) -> bool:
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise SpecError(f"{origin}: field {key!r} = {v!r} is invalid; expected true or false")
    return v


def from_hf_config(cfg: dict[str, Any], origin: str = "config.json") -> ModelSpec:
    """The ModelSpec of a Hugging Face ``config.json`` mapping (module docstring: families, fields)."""
    fam = _family(cfg, origin)
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise SpecError(
            f"{origin}: field 'hidden_act' = {act!r} is not supported for {fam}; valid: silu, swish"
        )
    if _bool(cfg, "mlp_bias", origin):
        raise SpecError(f"{origin}: field 'mlp_bias' = true is not supported; valid: false")
    window = cfg.get("sliding_window")
    if window is not None:
        _int(cfg, "sliding_window", origin)
    if (
        window is not None
        and _bool(cfg, "use_sliding_window", origin, fam in ("mistral", "mixtral"))
        and window < _int(cfg, "max_position_embeddings", origin, default=window + 1)
    ):
        raise SpecError(
            f"{origin}: field 'sliding_window' = {window!r}: sliding-window attention is not "
            "modelled (the attention cost assumes full causal attention); valid: null, or "
            "use_sliding_window = false"
        )
    hidden = _int(cfg, "hidden_size", origin)
    heads = _int(cfg, "num_attention_heads", origin)
    kv = _int(cfg, "num_key_value_heads", origin, default=heads)
    if "head_dim" in cfg and cfg["head_dim"] is not None:
        head_dim = _int(cfg, "head_dim", origin)
    elif hidden % heads:
        raise SpecError(
            f"{origin}: field 'head_dim' is missing and hidden_size = {hidden} is not divisible by "
            f"num_attention_heads = {heads}; give head_dim"
        )
    else:
        head_dim = hidden // heads
    layers = _int(cfg, "num_hidden_layers", origin)
    attn_bias = _bool(cfg, "attention_bias", origin)
    kw: dict[str, Any] = dict(
        name=_name(cfg, origin, fam),
        hidden=hidden,
        ffn=_int(cfg, "intermediate_size", origin),
        layers=layers,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        vocab=_int(cfg, "vocab_size", origin),
        tied_embeddings=_bool(cfg, "tie_word_embeddings", origin),
        qkv_bias=attn_bias or fam in ("qwen2", "qwen2_moe"),
        o_bias=attn_bias and fam not in ("qwen2", "qwen2_moe"),
        qk_norm=fam in ("qwen3", "qwen3_moe"),
        source=f"{origin} (Hugging Face config, family {fam})",
    )
    if fam == "mixtral":
        kw.update(
            experts=_int(cfg, "num_local_experts", origin),
            expert_ffn=kw["ffn"],
            experts_per_token=_int(cfg, "num_experts_per_tok", origin),
        )
    elif fam in ("qwen2_moe", "qwen3_moe"):
        experts = _int(cfg, "num_experts", origin, minimum=0)
        if experts:
            step = _int(cfg, "decoder_sparse_step", origin, default=1)
            only = cfg.get("mlp_only_layers") or []
            if not (
                isinstance(only, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in only)
            ):
                raise SpecError(
                    f"{origin}: field 'mlp_only_layers' = {only!r} is invalid; expected a list of "
                    "layer indices"
                )
            bad = [i for i in only if not 0 <= i < layers]
            if bad:
                raise SpecError(
                    f"{origin}: field 'mlp_only_layers' holds {bad[0]}; expected layer indices in "
                    f"0..{layers - 1}"
                )
            dense = tuple(i for i in range(layers) if i in only or (i + 1) % step)
            kw.update(
                experts=experts,
                experts_per_token=_int(cfg, "num_experts_per_tok", origin),
                expert_ffn=_int(cfg, "moe_intermediate_size", origin),
                dense_layers=dense,
            )
            if fam == "qwen2_moe":
                shared = _int(cfg, "shared_expert_intermediate_size", origin, minimum=0)
                kw.update(shared_expert_ffn=shared, shared_expert_gate=shared > 0)
            if len(dense) == layers:
                kw.update(
                    experts=0,
                    experts_per_token=0,
                    expert_ffn=0,
                    shared_expert_ffn=0,
                    shared_expert_gate=False,
                    dense_layers=(),
                )
    return _build(kw, origin, HF_KEYS)


def _name(cfg: dict[str, Any], origin: str, fam: str) -> str:
    """``_name_or_path`` if present, else the folder of a ``config.json`` or the file's stem."""
    if isinstance(cfg.get("_name_or_path"), str) and cfg["_name_or_path"]:
        return cfg["_name_or_path"]
    p = Path(origin)
    return (p.parent.name if p.name == "config.json" else p.stem) or fam


# ---- TOML ------------------------------------------------------------------------------------------------
def from_toml_mapping(data: dict[str, Any], origin: str = "model.toml") -> ModelSpec:
    """A ModelSpec from a TOML table with its fields (flat, or under a ``[model]`` table); ``head_dim``
    defaults to hidden / heads, ``kv_heads`` to heads, ``name`` to the file's stem."""
    if set(data) == {"model"} and isinstance(data["model"], dict):
        data = data["model"]
    bad = sorted(set(data) - set(TOML_KEYS))
    if bad:
        raise SpecError(f"{origin}: unknown key {bad[0]!r}; valid keys: {', '.join(TOML_KEYS)}")
    for k in TOML_REQUIRED:
        if k not in data:
            raise SpecError(f"{origin}: field {k!r} is missing; required: {', '.join(TOML_REQUIRED)}")
    for k, v in data.items():
        if k in _TOML_INT:
            check_number(v, f"{origin}: field {k!r}", integer=True, error=SpecError)
        if k in _TOML_BOOL and not isinstance(v, bool):
            raise SpecError(f"{origin}: field {k!r} = {v!r} is invalid; expected true or false")
        if k in _TOML_STR and not isinstance(v, str):
            raise SpecError(f"{origin}: field {k!r} = {v!r} is invalid; expected a string")
    if "dense_layers" in data and not (
        isinstance(data["dense_layers"], list)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in data["dense_layers"])
    ):
        raise SpecError(
            f"{origin}: field 'dense_layers' = {data['dense_layers']!r} is invalid; expected a list "
            "of layer indices"
        )
    kw = dict(data)
    kw.setdefault("name", Path(origin).stem)
    kw.setdefault("kv_heads", kw["heads"])
    if "head_dim" not in kw:
        if kw["heads"] <= 0 or kw["hidden"] % kw["heads"]:
            raise SpecError(
                f"{origin}: field 'head_dim' is missing and hidden = {kw['hidden']} is not divisible "
                f"by heads = {kw['heads']}; give head_dim"
            )
        kw["head_dim"] = kw["hidden"] // kw["heads"]
    kw["dense_layers"] = tuple(kw.get("dense_layers", ()))
    kw.setdefault("source", f"{origin} (model TOML)")
    return _build(kw, origin, {})


def _build(kw: dict[str, Any], origin: str, keys: dict[str, str]) -> ModelSpec:
    try:
        return ModelSpec(**kw)
    except SpecError as e:
        msg = str(e)
        field = msg.split(" ", 1)[0].removeprefix("model.")
        hint = f" (config.json field {keys[field]!r})" if field in keys else ""
        raise SpecError(f"{origin}: {msg}{hint}") from None
