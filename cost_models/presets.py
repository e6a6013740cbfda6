"""Named presets of models and GPUs, with their public sources.

Models: Llama 3 architecture numbers from Meta's model cards / ``config.json`` (Llama 3 paper, Dubey et al.
2024, Table 3).

GPUs and clusters (docs/models.md, "GPUs and clusters"): each preset's ``source`` names the data sheet of
every hardware number (peak dense BF16, HBM, NVLink / Infinity Fabric, domain size, NICs). Effective NCCL bus
bandwidths: measured on H100/H200 (about 370 GB/s over NVLink 4, 46-49 GB/s per NDR 400 Gb/s NIC: the
nccl-tests figures of docs/models.md, NCCL_SOURCE); for the others, where no comparable measurement is
published, the link's data-sheet rate times the efficiency measured on H100 (:data:`NVLINK_EFFICIENCY`,
:data:`NIC_EFFICIENCY`), except MI300X, whose usable xGMI rate AMD publishes.
"""

from __future__ import annotations

from pathlib import Path

from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.model_files import model_from_path
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

# NCCL's bus bandwidth as a fraction of the link's data-sheet rate, measured on H100 SXM: about 370 GB/s of
# NVLink 4's 450 GB/s per direction ("450GB/s is the line rate. With the protocol overhead (~20%) NCCL can get
# an effective NVLink bandwidth of 370GB/s": NCCL maintainer in NVIDIA/nccl-tests#212), 47 GB/s of an NDR
# NIC's 400 Gb/s = 50 GB/s (nccl-tests; module docstring).
NVLINK_EFFICIENCY = 370.0 / 450.0
NIC_EFFICIENCY = 47.0 / 50.0
NDR_GBS = 50.0  # ConnectX-7 / NDR InfiniBand, 400 Gb/s
HDR_GBS = 25.0  # ConnectX-6 / HDR InfiniBand, 200 Gb/s
_HOPPER_NET = ("NCCL: ~370 GB/s bus bandwidth on NVLink 4 and 46-49 GB/s per NDR NIC (nccl-tests, "
               "docs/models.md)")
_DERIVED_NET = ("NCCL bandwidths = data-sheet rate x the efficiency measured on H100 (370/450 on NVLink, "
                "47/50 on a NIC)")


def _derived_nvlink(per_direction_gbs: float) -> float:
    return round(NVLINK_EFFICIENCY * per_direction_gbs, 1)


def _derived_network(nic_gbs: float) -> float:
    return round(NIC_EFFICIENCY * nic_gbs, 1)


GPUS: dict[str, GPUSpec] = {
    "a100": GPUSpec(
        "a100", peak_bf16_tflops=312.0, hbm_gb=80.0, hbm_bw_gbs=2039.0, nvlink_gbs=_derived_nvlink(300.0),
        network_gbs=_derived_network(HDR_GBS), gpus_per_node=8, nvlink_domain=8, nics_per_node=8,
        nic_gbs=HDR_GBS,
        source="NVIDIA A100 Tensor Core GPU data sheet (SXM4 80GB: 312 TFLOP/s dense BF16, 80 GB HBM2e at "
               "2,039 GB/s, NVLink 3 600 GB/s = 300 per direction); NVIDIA DGX A100 data sheet (8 GPUs on "
               "NVSwitch, 8x ConnectX-6 HDR 200 Gb/s compute NICs); " + _DERIVED_NET),
    "h100": GPUSpec(
        "h100", peak_bf16_tflops=989.0, hbm_gb=80.0, hbm_bw_gbs=3350.0, nvlink_gbs=370.0, network_gbs=47.0,
        gpus_per_node=8, nvlink_domain=8, nics_per_node=8, nic_gbs=NDR_GBS,
        source="NVIDIA H100 Tensor Core GPU data sheet (SXM5: 989 TFLOP/s dense BF16, 80 GB HBM3 at 3.35 TB/s, "
               "NVLink 4 900 GB/s); NVIDIA DGX H100 data sheet (8 GPUs on NVSwitch, 8x ConnectX-7 400 Gb/s "
               "compute NICs); " + _HOPPER_NET),
    "h200": GPUSpec(
        "h200", peak_bf16_tflops=989.0, hbm_gb=141.0, hbm_bw_gbs=4800.0, nvlink_gbs=370.0, network_gbs=47.0,
        gpus_per_node=8, nvlink_domain=8, nics_per_node=8, nic_gbs=NDR_GBS,
        source="NVIDIA H200 Tensor Core GPU data sheet (SXM: 989 TFLOP/s dense BF16, 141 GB HBM3e at 4.8 TB/s, "
               "NVLink 4 900 GB/s); HGX H200: 8 GPUs on NVSwitch, 8x ConnectX-7 400 Gb/s; " + _HOPPER_NET),
    "b200": GPUSpec(
        "b200", peak_bf16_tflops=2250.0, hbm_gb=180.0, hbm_bw_gbs=8000.0, nvlink_gbs=_derived_nvlink(900.0),
        network_gbs=_derived_network(NDR_GBS), gpus_per_node=8, nvlink_domain=8, nics_per_node=8,
        nic_gbs=NDR_GBS,
        source="NVIDIA HGX B200 / DGX B200 data sheets (per GPU: 2.25 PFLOP/s dense BF16 = half the 4.5 "
               "with sparsity, 180 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s = 900 GB/s per direction; 8 GPUs on "
               "NVSwitch; 8x ConnectX-7 400 Gb/s); MLPerf Inference v6.0 system description "
               "nebius_b200_n1.json (B200-SXM-180GB, 8x ConnectX-7 NDR 400 Gb/s); " + _DERIVED_NET),
    "gb200": GPUSpec(
        "gb200", peak_bf16_tflops=2500.0, hbm_gb=186.0, hbm_bw_gbs=8000.0, nvlink_gbs=_derived_nvlink(900.0),
        network_gbs=_derived_network(NDR_GBS), gpus_per_node=4, nvlink_domain=72, nics_per_node=4,
        nic_gbs=NDR_GBS,
        source="NVIDIA GB200 NVL72 data sheet (72 GPUs in one NVLink domain: 360 PFLOP/s BF16 with sparsity "
               "= 2.5 PFLOP/s dense per GPU, 13.4 TB HBM3e = 186 GB and 576 TB/s = 8 TB/s per GPU, 130 TB/s "
               "NVLink = 1.8 TB/s per GPU); compute trays of 4 GPUs with 4x ConnectX-7 400 Gb/s (MLPerf "
               "Inference v6.1 system description GB200-NVL72_GB200-186GB_aarch64x16); " + _DERIVED_NET
               + " (MNNVL all_reduce measured at 811 GB/s on 2 trays, lixueduan.com 2025, with NVLink SHARP)"),
    "mi300x": GPUSpec(
        "mi300x", peak_bf16_tflops=1307.4, hbm_gb=192.0, hbm_bw_gbs=5300.0, nvlink_gbs=336.0,
        network_gbs=_derived_network(NDR_GBS), gpus_per_node=8, nvlink_domain=8, nics_per_node=8,
        nic_gbs=NDR_GBS,
        source="AMD Instinct MI300X data sheet (1,307.4 TFLOP/s dense BF16, 192 GB HBM3 at 5.3 TB/s); AMD "
               "Instinct MI300X Platform data sheet (8 GPUs fully connected by Infinity Fabric, 7 xGMI links "
               "per GPU); AMD ROCm blog 'Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct "
               "MI300X' (2025: 64 GB/s per link, about 48 usable, so 7 x 48 = 336 GB/s of bus bandwidth); "
               "one 400 Gb/s NIC per GPU on 8 rails (TensorWave cluster docs); NIC bandwidth: " + _DERIVED_NET),
}


def get_model(name: str) -> ModelSpec:
    """A model preset, or a model file: a Hugging Face ``config.json`` (``.json``) or a model TOML
    (``.toml``), read by :mod:`cost_models.model_files`."""
    if name in MODELS:
        return MODELS[name]
    model = model_from_path(name)
    if model is not None:
        return model
    if Path(name).is_dir():
        raise SpecError(f"{name}: the folder holds no config.json; expected a Hugging Face model folder with a "
                        "config.json, a model .json/.toml file or a preset, one of " + ", ".join(sorted(MODELS)))
    raise SpecError(f"unknown model preset {name!r}; valid: {', '.join(sorted(MODELS))}, or a Hugging Face "
                    "config.json or a model .toml file")


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise SpecError(f"unknown GPU preset {name!r}; valid: {', '.join(sorted(GPUS))}") from None
