"""Named presets of models and GPUs, with their public sources.

Models: Llama 3 architecture numbers from Meta's model cards / ``config.json`` (Llama 3 paper, Dubey et al.
2024, Table 3). GPUs: NVIDIA H100 SXM5 and H200 SXM data sheets (989 TFLOP/s dense BF16; 80 GB HBM3 at
3.35 TB/s; 141 GB HBM3e at 4.8 TB/s); NCCL reaches about 370 GB/s bus bandwidth on NVLink4 and 46-49 GB/s
per GPU over InfiniBand NDR 400 Gb/s (nccl-tests figures collected in docs/sources.md).
"""

from __future__ import annotations

from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.specs import GPUSpec, ModelSpec

MODELS: dict[str, ModelSpec] = {
    "llama3-8b": ModelSpec("llama3-8b", hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8,
                           head_dim=128, vocab=128256),
    "llama3-70b": ModelSpec("llama3-70b", hidden=8192, ffn=28672, layers=80, heads=64, kv_heads=8,
                            head_dim=128, vocab=128256),
    # A toy model for tests and for real_runtime on CPUs.
    "tiny": ModelSpec("tiny", hidden=128, ffn=384, layers=2, heads=4, kv_heads=2, head_dim=32, vocab=512),
}

GPUS: dict[str, GPUSpec] = {
    "h100": GPUSpec("h100", peak_bf16_tflops=989.0, hbm_gb=80.0, hbm_bw_gbs=3350.0, nvlink_gbs=370.0,
                    network_gbs=47.0, gpus_per_node=8),
    "h200": GPUSpec("h200", peak_bf16_tflops=989.0, hbm_gb=141.0, hbm_bw_gbs=4800.0, nvlink_gbs=370.0,
                    network_gbs=47.0, gpus_per_node=8),
}


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise SpecError(f"unknown model preset {name!r}; valid: {', '.join(sorted(MODELS))}") from None


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise SpecError(f"unknown GPU preset {name!r}; valid: {', '.join(sorted(GPUS))}") from None
