"""Named presets of models and GPUs, with their public sources.

Models: each preset's ``source`` names its Hugging Face model card / ``config.json`` (Llama 3: also the
Llama 3 paper, Dubey et al. 2024, Table 3; Mixtral: Jiang et al. 2024). ``dcpsim model NAME`` prints them.
GPUs: NVIDIA H100 SXM5 and H200 SXM data sheets (989 TFLOP/s dense BF16; 80 GB HBM3 at
3.35 TB/s; 141 GB HBM3e at 4.8 TB/s); NCCL reaches about 370 GB/s bus bandwidth on NVLink4 and 46-49 GB/s
per GPU over InfiniBand NDR 400 Gb/s (nccl-tests figures collected in docs/sources.md).
"""

from __future__ import annotations

from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.specs import GPUSpec, ModelSpec

_HF = "https://huggingface.co/"
MODELS: dict[str, ModelSpec] = {
    "llama3-8b": ModelSpec("llama3-8b", hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8,
                           head_dim=128, vocab=128256,
                           source=f"{_HF}meta-llama/Meta-Llama-3-8B config.json; Llama 3 paper Table 3"),
    "llama3-70b": ModelSpec("llama3-70b", hidden=8192, ffn=28672, layers=80, heads=64, kv_heads=8,
                            head_dim=128, vocab=128256,
                            source=f"{_HF}meta-llama/Meta-Llama-3-70B config.json; Llama 3 paper Table 3"),
    # Dense above 70B: 405.9B parameters (model card: 405B).
    "llama3.1-405b": ModelSpec("llama3.1-405b", hidden=16384, ffn=53248, layers=126, heads=128, kv_heads=8,
                               head_dim=128, vocab=128256,
                               source=f"{_HF}meta-llama/Llama-3.1-405B config.json; Llama 3 paper Table 3"),
    # Dense, 72.7B parameters (model card), biases on Q, K, V.
    "qwen2.5-72b": ModelSpec("qwen2.5-72b", hidden=8192, ffn=29568, layers=80, heads=64, kv_heads=8,
                             head_dim=128, vocab=152064, qkv_bias=True,
                             source=f"{_HF}Qwen/Qwen2.5-72B config.json (model card: 72.7B parameters)"),
    # MoE, 8 experts, top 2: 46.7B total, 12.9B active (Mixtral of Experts, Jiang et al. 2024).
    "mixtral-8x7b": ModelSpec("mixtral-8x7b", hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8,
                              head_dim=128, vocab=32000, experts=8, experts_per_token=2, expert_ffn=14336,
                              source=f"{_HF}mistralai/Mixtral-8x7B-v0.1 config.json (paper: 46.7B total, "
                                     "12.9B active)"),
    # MoE, 128 experts, top 8, Q/K norms: 30.5B total, 3.3B active (model card).
    "qwen3-30b-a3b": ModelSpec("qwen3-30b-a3b", hidden=2048, ffn=6144, layers=48, heads=32, kv_heads=4,
                               head_dim=128, vocab=151936, qk_norm=True, experts=128, experts_per_token=8,
                               expert_ffn=768,
                               source=f"{_HF}Qwen/Qwen3-30B-A3B config.json (model card: 30.5B total, "
                                      "3.3B activated)"),
    # A toy model for tests and for real_runtime on CPUs.
    "tiny": ModelSpec("tiny", hidden=128, ffn=384, layers=2, heads=4, kv_heads=2, head_dim=32, vocab=512,
                      source="a toy model of this project (tests, real_runtime on CPUs)"),
}

GPUS: dict[str, GPUSpec] = {
    "h100": GPUSpec("h100", peak_bf16_tflops=989.0, hbm_gb=80.0, hbm_bw_gbs=3350.0, nvlink_gbs=370.0,
                    network_gbs=47.0, gpus_per_node=8),
    "h200": GPUSpec("h200", peak_bf16_tflops=989.0, hbm_gb=141.0, hbm_bw_gbs=4800.0, nvlink_gbs=370.0,
                    network_gbs=47.0, gpus_per_node=8),
}


def get_model(name: str) -> ModelSpec:
    """A model preset, or a model file: a Hugging Face ``config.json`` (``.json``) or a model TOML
    (``.toml``), read by :mod:`cost_models.model_files`."""
    if name in MODELS:
        return MODELS[name]
    from dcpsim.cost_models.model_files import is_model_file, load_model_file

    if is_model_file(name):
        return load_model_file(name)
    raise SpecError(f"unknown model preset {name!r}; valid: {', '.join(sorted(MODELS))}, or a Hugging Face "
                    "config.json or a model .toml file")


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise SpecError(f"unknown GPU preset {name!r}; valid: {', '.join(sorted(GPUS))}") from None
