"""Models from files: Hugging Face config.json families and model TOML files, checked against published
parameter counts and hand calculations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.cost_models import ModelSpec, SpecError, get_model
from dcpsim.cost_models.flops import linear_fwd_flops_per_token
from dcpsim.cost_models.model_files import from_hf_config, load_model_file
from dcpsim.cost_models.presets import MODELS

MODELS_DIR = Path(__file__).parent.parent / "data" / "models"  # sources: tests/data/SOURCES.md


@pytest.mark.parametrize(
    "folder, total, active",
    [
        ("Qwen2.5-72B", 72.7e9, 72.7e9),  # model card: 72.7B
        ("Mixtral-8x7B-v0.1", 46.7e9, 12.9e9),  # Jiang et al. 2024: 46.7B total, 12.9B active
        # Model card: 30.5B total, 3.3B activated; see the next test for the activated count.
        ("Qwen3-30B-A3B", 30.5e9, 3.35e9),
    ],
)
def test_published_parameter_counts_within_one_percent(folder, total, active):
    m = load_model_file(MODELS_DIR / folder / "config.json")
    assert m.params_total == pytest.approx(total, rel=0.01)
    assert m.params_active == pytest.approx(active, rel=0.01)


def test_qwen3_activated_count_is_the_cards_figure_truncated():
    # Exact count, by hand: 48 layers × (attention 2·2048·4096 + 2·2048·512, router 2048·128, 8 experts of
    # 3·2048·768, norms 2·2048 + 2·128) + embedding and head 2·151936·2048 + final norm 2048 = 3,353,032,704.
    # The card says "3.3B": that is 3.353B cut to one decimal (1.6% below it); the card's other figures
    # (30.5B total, 29.9B non-embedding) are matched within 0.1%, so the difference is the card's rounding,
    # not a different convention (no convention — head without input embedding, non-embedding — gives 3.3B
    # within 1%: 3.04B and 2.73B).
    m = load_model_file(MODELS_DIR / "Qwen3-30B-A3B" / "config.json")
    per_layer = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2048 * 128 + 8 * 3 * 2048 * 768 + 2 * 2048 + 2 * 128
    assert m.params_active == 48 * per_layer + 2 * 151936 * 2048 + 2048 == 3_353_032_704
    assert int(m.params_active / 1e8) / 10 == 3.3
    assert m.params_total - m.embedding_params == pytest.approx(29.9e9, rel=0.001)


def test_presets_match_their_config_files():
    for preset, folder in (
        ("qwen2.5-72b", "Qwen2.5-72B"),
        ("mixtral-8x7b", "Mixtral-8x7B-v0.1"),
        ("qwen3-30b-a3b", "Qwen3-30B-A3B"),
    ):
        a, b = MODELS[preset], load_model_file(MODELS_DIR / folder / "config.json")
        assert (a.params_total, a.params_active) == (b.params_total, b.params_active)
        assert a.source.startswith("https://huggingface.co/")
    assert MODELS["llama3.1-405b"].params_total == pytest.approx(405e9, rel=0.01)  # model card: 405B


def test_dense_preset_flops_unchanged():
    # Llama-3-8B: 4h²(1 + g/a) + 6hf (docs/cost_model.md), the number the first version priced.
    m = get_model("llama3-8b")
    h, f, a, g = 4096, 14336, 32, 8
    assert linear_fwd_flops_per_token(m) == 4 * h * h * (1 + g / a) + 6 * h * f


def _qwen2_moe_cfg() -> dict:
    return {
        "model_type": "qwen2_moe",
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
        "vocab_size": 100,
        "tie_word_embeddings": False,
    }


def test_qwen2_moe_sparse_step_only_layers_and_shared_expert_by_hand():
    m = from_hf_config(_qwen2_moe_cfg(), "cfg")
    # MoE where (i + 1) % 2 == 0 and i not in [3]: layer 1 only.
    assert m.dense_layers == (0, 2, 3) and m.moe_layers == 1
    attn = 64 * 64 + 2 * 64 * 32 + 64 * 64 + (64 + 2 * 32)  # Q, K, V, O + Q/K/V biases (Qwen2)
    dense = attn + 3 * 64 * 96
    moe = attn + 64 * 8 + (3 * 64 * 48 + 64) + 8 * 3 * 64 * 32  # router, gated shared expert, 8 experts
    norms = 4 * 2 * 64 + 64
    assert m.params_total == 3 * dense + moe + 2 * 100 * 64 + norms == 177280
    assert m.params_active == 177280 - 6 * 3 * 64 * 32
    active_moe = attn + 64 * 8 + (3 * 64 * 48 + 64) + 2 * 3 * 64 * 32
    assert linear_fwd_flops_per_token(m) == pytest.approx(2 * (3 * dense + active_moe) / 4)


def test_family_from_architectures_and_head_dim_defaults():
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "attention_bias": True,
        "tie_word_embeddings": True,
    }
    m = from_hf_config(cfg, "x/config.json")
    assert (m.head_dim, m.qkv_bias, m.o_bias, m.tied_embeddings, m.name) == (32, True, True, True, "x")
    attn = 256 * 256 + 2 * 256 * 64 + 256 * 256 + (256 + 2 * 64) + 256
    assert m.params_total == 2 * (attn + 3 * 256 * 512 + 2 * 256) + 1000 * 256 + 256
    no_kv = dict(cfg)
    del no_kv["num_key_value_heads"]
    assert from_hf_config(no_kv, "c").kv_heads == 8  # transformers' default: as many KV heads as heads


def test_toml_gelu_tied_by_hand(tmp_path):
    p = tmp_path / "small.toml"
    p.write_text(
        'hidden = 32\nffn = 128\nlayers = 2\nheads = 4\nvocab = 50\nmlp = "gelu"\ntied_embeddings = true\n'
    )
    m = load_model_file(p)
    assert (m.name, m.kv_heads, m.head_dim) == ("small", 4, 8)
    per_layer = 4 * 32 * 32 + 2 * 32 * 128  # Q, K, V, O + GELU's two matrices
    assert m.params_total == 2 * per_layer + 50 * 32 + 2 * 2 * 32 + 32 == 26336
    assert linear_fwd_flops_per_token(m) == 2 * per_layer


def test_toml_moe_under_a_model_table(tmp_path):
    p = tmp_path / "moe.toml"
    p.write_text(
        "[model]\nhidden = 64\nffn = 128\nlayers = 2\nheads = 4\nkv_heads = 2\nvocab = 10\n"
        "experts = 4\nexperts_per_token = 1\nexpert_ffn = 16\ndense_layers = [0]\n"
    )
    m = load_model_file(p)
    assert m.moe_layers == 1 and m.is_moe_layer(1) and not m.is_moe_layer(0)
    assert m.params_total - m.params_active == 3 * 3 * 64 * 16


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"hidden_size": None}, "'hidden_size' is missing"),
        ({"hidden_size": 0}, "'hidden_size' = 0"),
        ({"num_key_value_heads": 3}, "must divide model.heads = 32"),
        ({"num_experts_per_tok": 9}, "experts_per_token = 9"),
        ({"model_type": "gpt2"}, "model_type = 'gpt2' is not supported"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"num_local_experts": -1}, "'num_local_experts' = -1"),
    ],
)
def test_bad_config_json_is_one_clear_error(change, needle):
    cfg = json.loads((MODELS_DIR / "Mixtral-8x7B-v0.1" / "config.json").read_text())
    for k, v in change.items():
        if v is None:
            del cfg[k]
        else:
            cfg[k] = v
    with pytest.raises(SpecError, match=None) as e:
        from_hf_config(cfg, "bad/config.json")
    assert needle in str(e.value) and "bad/config.json" in str(e.value)
    assert "\n" not in str(e.value)


def test_sliding_window_in_use_is_refused():
    cfg = {
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "sliding_window": 4096,
        "max_position_embeddings": 32768,
    }
    with pytest.raises(SpecError, match="sliding-window attention is not modelled"):
        from_hf_config(cfg, "mistral")
    assert from_hf_config(dict(cfg, sliding_window=None), "mistral").params_total == pytest.approx(
        7.24e9, rel=0.01
    )


def test_a_model_folder_reads_its_config_json():
    folder = get_model(str(MODELS_DIR / "Mixtral-8x7B-v0.1"))
    assert folder == load_model_file(MODELS_DIR / "Mixtral-8x7B-v0.1" / "config.json")
    assert folder.name == "Mixtral-8x7B-v0.1"


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 64),
    f=st.integers(1, 512),
    layers=st.integers(1, 12),
    heads=st.integers(1, 8),
    group=st.integers(1, 4),
    d=st.integers(1, 64),
    vocab=st.integers(1, 1000),
    experts=st.integers(0, 16),
    k=st.integers(1, 16),
    fe=st.integers(1, 256),
    fs=st.integers(0, 64),
    dense=st.sets(st.integers(0, 11)),
    mlp=st.sampled_from(["swiglu", "gelu"]),
    flags=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_counts_agree_with_the_flops_for_any_model(
    h, f, layers, heads, group, d, vocab, experts, k, fe, fs, dense, mlp, flags
):
    moe = experts > 0
    m = ModelSpec(
        "m",
        hidden=8 * h,
        ffn=f,
        layers=layers,
        heads=heads * group,
        kv_heads=heads,
        head_dim=d,
        vocab=vocab,
        mlp=mlp,
        tied_embeddings=flags[0],
        qkv_bias=flags[1],
        o_bias=flags[2],
        qk_norm=flags[3],
        experts=experts,
        experts_per_token=min(k, experts) if moe else 0,
        expert_ffn=fe if moe else 0,
        shared_expert_ffn=fs if moe else 0,
        shared_expert_gate=moe and fs > 0,
        dense_layers=tuple(i for i in dense if i < layers) if moe else (),
    )
    norms = layers * m.norm_params_per_layer + m.hidden
    # Two code paths: the active count (totals less unused experts) and the FLOPs (per-layer active weights).
    assert 2 * (m.params_active - norms - m.embedding_params) == pytest.approx(
        linear_fwd_flops_per_token(m) * layers, rel=1e-12
    )
    unused = (m.experts - m.experts_per_token) * m.expert_params * m.moe_layers
    assert m.params_total - m.params_active == unused >= 0
    assert m.moe_layers == (layers - len(m.dense_layers) if moe else 0)


def test_the_toml_example_of_docs_models_md_is_valid(tmp_path):
    doc = (Path(__file__).parent.parent.parent / "docs" / "models.md").read_text()
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    p = tmp_path / "my-model.toml"
    p.write_text(block)
    m = load_model_file(p)
    got = (m.name, m.experts, m.experts_per_token, m.dense_layers, m.moe_layers)
    assert got == ("my-moe", 64, 4, (0,), 23)


def test_the_preset_table_of_docs_models_md_is_current():
    doc = (Path(__file__).parent.parent.parent / "docs" / "models.md").read_text()
    def fmt(n: int) -> str:
        return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"

    for name, m in MODELS.items():
        assert f"| `{name}` | {fmt(m.params_total)} | {fmt(m.params_active)} |" in doc, name
