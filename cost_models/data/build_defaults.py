"""Build the shipped calibration data from the reference tables in ``cost_models/data/reference``.

Run from the repository root::

    python -m dcpsim.cost_models.data.build_defaults          # rewrites profile_h100.csv, calibration_h100.json,
                                                       # calibration_h200_kernels.json, cp_scaling_check.csv

The shipped H200 default, ``calibration_h200.json``, is the end-to-end fit of ``calibration_h200_kernels.json``
(step 3's H200 kernel fit) to DistCA's measured steps (step 6).

Steps (sources and licences in reference/SOURCES.md):

1. ``h100_attention_tflops_published.csv`` (FlashAttention-2/3 papers) → attention rows of the profile schema.
   The papers' runs use hidden size 2048 (heads = 2048 / head_dim) and batches of ``batch_tokens`` tokens
   (batch = batch_tokens / seqlen); time = FLOPs / (TFLOP/s · 10¹²) with the papers' own FLOP convention,
   which is cost_models.profile_table's: forward 4·seqlen²·d·heads per sequence, halved under a causal mask,
   backward 2.5x forward. The FA2 paper's ``fwd+bwd`` rows become ``attn_fwd_bwd`` rows (3.5x the forward
   FLOPs): they set FA2's backward curves (step 5).
2. ``nccl_h100x8_intranode.csv`` (nccl-tests) → collective rows: out-of-place time, ``size_bytes`` as bytes,
   ``ngpu`` as group size, link nvlink.
3. Fit with :func:`cost_models.fitting.fit_calibration` on top of the published figures
   (:func:`cost_models.calibration.published_calibration`): H100 as measured; H200 from the same rows, since
   the H200 SXM has the H100 SXM's tensor cores, clocks and NVLink 4 (data sheets: 989 dense BF16 TFLOP/s,
   900 GB/s NVLink) and attention at head_dim 128 is compute-bound, so its larger, faster HBM changes neither
   curve. Network links stay at the published figures (the NCCL data is intra-node only).
4. ``attn_h100_per_doc_by_cp_tp.csv`` (DistCA) → relative CP / TP speed-ups against the fitted forward curve
   (cp_scaling_check.csv); absolute values are not used (its head configuration is unknown).
5. ``h200_cudnn_sdpa_llama31.csv`` (cudnn-frontend) → attention rows of kernel ``cudnn-1.19.0`` (device
   h200) in the same profile, fitted with the rest: the cuDNN backend's four curves
   (cost_models.attention_backends; both GPUs, by the same H100 = H200 compute argument as step 3). FA2's
   backward curves come from the FA2 paper's ``fwd+bwd`` rows (op ``attn_fwd_bwd``): backward time =
   fwd+bwd time − the fitted forward.
6. H200 default (docs/validation.md): the GEMM rate and the NVLink and network bandwidth scales of
   ``calibration_h200_kernels.json`` fitted to the six shipped DistCA files (measured/distca, 212 steps)::

       dcpsim calibrate --runs cost_models/data/measured/distca/*.json --from distca --gpu h200 \\
           --base cost_models/data/calibration_h200_kernels.json \\
           --knobs gemm_peak_tflops,nvlink_scale,network_scale --name h200-distca-steps \\
           -o cost_models/data/calibration_h200.json

7. H100 default: the kernel fit with its GEMM rate (:data:`H100_GEMM_PEAK_TFLOPS`) fitted end to end to the
   dgxc-benchmarking NeMo BF16 rows (measured/dgxc_recipes_bf16.csv, the 12 H100 rows, GEMMs by shape):
   least squares on log(simulated / published tokens/s/GPU), printed by
   ``PYTHONPATH=. python -m tests.cost_models._dgxc --fit`` (the rows' jobs are defined with the tests).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from dcpsim.cost_models.calibration import Calibration, SaturatingCurve, published_calibration
from dcpsim.cost_models.fitting import cp_scaling_check, fit_calibration
from dcpsim.cost_models.flops import ATTENTION_BWD_FACTOR
from dcpsim.cost_models.presets import get_gpu
from dcpsim.cost_models.profile_table import COLUMNS, read_profile, validate_profile, write_profile

HERE = Path(__file__).parent
REFERENCE = HERE / "reference"
FA_HIDDEN = 2048  # FlashAttention-2/3 papers' benchmark setting
NCCL_SOURCE = "nccl-tests out-of-place, H100 SXM x8 one node (hao-ai-lab/DistCA nccl_perf.csv, Apache-2.0)"
CUDNN_SOURCE = ("cudnn-frontend SDPA benchmark, H200, Llama-3.1 shape (NVIDIA/cudnn-frontend "
                "benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn, MIT)")
NAMES = {"h100": "h100-reference-fit", "h200": "h200-from-h100-reference-fit"}
# step 7: fitted to the dgxc rows (python -m tests.cost_models._dgxc --fit printed 656.6)
H100_GEMM_PEAK_TFLOPS = 656.6
DGXC_SOURCE = ("GEMM rate 656.6 TFLOP/s fitted end to end (least squares on log tokens/s/GPU, GEMMs by shape) to "
               "the 12 H100 rows of NVIDIA/dgxc-benchmarking's NeMo BF16 recipes (measured/dgxc_recipes_bf16.csv)")
FILES = {"h100": "calibration_h100.json", "h200": "calibration_h200_kernels.json"}  # step 6 fits the H200 default


def convert_published_attention(path: Path) -> pd.DataFrame:
    """Profile rows (attn_fwd / attn_bwd / attn_fwd_bwd) from the published TFLOP/s table."""
    src = pd.read_csv(path)
    rows = []
    for r in src.to_dict("records"):
        L, d = int(r["seqlen"]), int(r["head_dim"])
        heads, batch = FA_HIDDEN // d, int(r["batch_tokens"]) // L
        flops = 4.0 * L**2 * d * heads * batch * (0.5 if int(r["causal"]) else 1.0)
        flops *= {"fwd": 1.0, "bwd": ATTENTION_BWD_FACTOR, "fwd+bwd": 1.0 + ATTENTION_BWD_FACTOR}[r["pass"]]
        seconds = float(f"{flops / (float(r['tflops']) * 1e12):.6g}")
        rows.append({"op": "attn_" + r["pass"].replace("+", "_"), "kernel": r["kernel"], "q_len": L, "kv_len": L,
                     "batch": batch, "heads": heads, "kv_heads": heads, "head_dim": d,
                     "causal": int(r["causal"]), "device": "h100", "seconds": seconds,
                     "source": str(r["source"])})
    return _table(rows)


def convert_nccl(path: Path) -> pd.DataFrame:
    """Profile rows of the nccl-tests collectives (out-of-place time)."""
    src = pd.read_csv(path)
    rows = [{"op": r.op, "bytes": int(r.size_bytes), "group_size": int(r.ngpu), "link": "nvlink",
             "device": "h100", "seconds": float(f"{r.t_us_out}e-6"), "source": NCCL_SOURCE}
            for r in src.itertuples(index=False)]
    return _table(rows)


def convert_cudnn_h200(path: Path) -> pd.DataFrame:
    """Profile rows of the cudnn-frontend H200 SDPA table (forward and backward, causal and unmasked)."""
    src = pd.read_csv(path)
    rows = []
    for r in src.to_dict("records"):
        for op, col in (("attn_fwd", "fwd_ms"), ("attn_bwd", "bwd_ms")):
            rows.append({"op": op, "kernel": r["kernel"], "q_len": int(r["seqlen"]), "kv_len": int(r["seqlen"]),
                         "batch": int(r["batch"]), "heads": int(r["heads_q"]), "kv_heads": int(r["heads_kv"]),
                         "head_dim": int(r["head_dim"]), "causal": int(r["mask"] == "causal"), "device": "h200",
                         "seconds": float(f"{float(r[col]) / 1e3:.6g}"), "source": CUDNN_SOURCE})
    return _table(rows)


def _table(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    return validate_profile(df.astype(object).where(df.notna(), ""), origin="converted reference table")


def shipped_h100(kernel_fit: Calibration) -> Calibration:
    """The shipped H100 default from its kernel fit (step 7: the GEMM rate fitted to the dgxc rows)."""
    return replace(kernel_fit, gemm=SaturatingCurve(H100_GEMM_PEAK_TFLOPS, kernel_fit.gemm.half),
                   source=f"{kernel_fit.source} | {DGXC_SOURCE}")


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else HERE
    att = convert_published_attention(REFERENCE / "h100_attention_tflops_published.csv")
    cudnn = convert_cudnn_h200(REFERENCE / "h200_cudnn_sdpa_llama31.csv")
    profile = pd.concat([att, cudnn, convert_nccl(REFERENCE / "nccl_h100x8_intranode.csv")], ignore_index=True)
    write_profile(profile, out / "profile_h100.csv")
    profile = read_profile(out / "profile_h100.csv")
    for gpu, name in NAMES.items():
        cal, report = fit_calibration(profile, published_calibration(get_gpu(gpu)), name)
        if gpu == "h100":
            cal = shipped_h100(cal)
        (out / FILES[gpu]).write_text(cal.to_json() + "\n")
        print(f"{gpu}: wrote {out / FILES[gpu]}")
        for t in report.terms:
            print(f"  {t.key:24s} {t.how:8s} {t.params}  MAPE {t.mape:.1%}")
        if gpu == "h100":
            print("  leave-one-out median |error| per kernel:",
                  {k: f"{v:.1%}" for k, v in report.loo_median.items()})
            chk = cp_scaling_check(pd.read_csv(REFERENCE / "attn_h100_per_doc_by_cp_tp.csv"), cal.attn_fwd)
            chk.round(4).to_csv(out / "cp_scaling_check.csv", index=False, lineterminator="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
