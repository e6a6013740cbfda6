"""The cost model against every published measurement the project ships (``dcpsim reproduce``): each
measurement's prediction, measured value, relative error and the tolerance of its suite
(``cost_models/data/reference/tolerances.csv``, written beside the data with the reason). The suites and
what each predicts are described in ``dcpsim reproduce --help`` (experiments/cli/reproduce.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from dcpsim.cost_models import AnalyticCostModel, CostTerms, GroupBatch, JobSpec, ModelSpec, get_gpu
from dcpsim.cost_models.attention_backends import backend_of_kernel
from dcpsim.cost_models.calibration import COLLECTIVES, DATA_DIR, SaturatingCurve, default_calibration
from dcpsim.cost_models.flops import ATTENTION_BWD_FACTOR

REFERENCE = DATA_DIR / "reference"
FREE = SaturatingCurve(math.inf, 0.0)
TE_RANGES = {"1x512K": (3.98, 4.23), "256x2K": (3.03, 3.41)}  # TE CP benchmark, docs/calibration.md
ZIGZAG_EFFICIENCY = 0.90  # ring-flash-attention README
H800_NVLINK_SCALE = 400.0 / 900.0  # NVLink GB/s, H800 over H100 (data sheets)


@dataclass(frozen=True)
class Case:
    suite: str
    case: str
    predicted: float
    measured: float
    error: float  # relative (signed; distance to a range for range measurements)
    tolerance: float
    unit: str
    measured_range: tuple[float, float] | None = None  # a range measurement: ``measured`` is its middle

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.tolerance

    @property
    def in_range(self) -> bool:
        """The prediction lies inside a measured range (its error is 0 by definition, not by a match)."""
        return self.measured_range is not None and self.measured_range[0] <= self.predicted <= self.measured_range[1]

    def to_dict(self) -> dict:
        d = {"suite": self.suite, "case": self.case, "predicted": self.predicted, "measured": self.measured,
             "error": self.error, "tolerance": self.tolerance, "unit": self.unit, "ok": self.ok}
        if self.measured_range is not None:
            d["measured_range"] = list(self.measured_range)
        return d


def tolerances() -> dict[str, float]:
    import pandas as pd  # pandas and the profile tables load in the functions: 'dcpsim --help' stays fast

    t = pd.read_csv(REFERENCE / "tolerances.csv")
    return {str(s): float(v) for s, v in zip(t["suite"], t["tolerance"])}


def _case(suite: str, case: str, pred: float, meas: float, tol: dict[str, float], unit: str) -> Case:
    return Case(suite, case, float(pred), float(meas), float(pred / meas - 1.0), tol[suite], unit)


def attention_cases(tol: dict[str, float]) -> list[Case]:
    from dcpsim.cost_models.profile_table import FWD_BWD_OP, read_profile, row_flops, row_size

    prof = read_profile(DATA_DIR / "profile_h100.csv")
    att = prof[prof["op"].isin(["attn_fwd", "attn_bwd", FWD_BWD_OP]) & (prof["head_dim"] == 128)]
    out = []
    for dev, rows in att.groupby("device", sort=True):
        cal = default_calibration(get_gpu(str(dev)))
        x, flops = row_size(rows), row_flops(rows)
        for i, r in enumerate(rows.to_dict("records")):
            b = backend_of_kernel(r["kernel"])
            if b is None:
                continue  # a kernel of no backend (none in the shipped profile)
            ac = cal.attention[b]
            mask = "causal" if int(r["causal"]) else "full"
            if r["op"] == FWD_BWD_OP:
                f = flops[i] / (1 + ATTENTION_BWD_FACTOR)
                pred = ac.curve(f"fwd_{mask}").seconds(f, x[i]) + ac.curve(f"bwd_{mask}").seconds(
                    ATTENTION_BWD_FACTOR * f, x[i])
            else:
                pred = ac.curve(f"{r['op'][5:]}_{mask}").seconds(flops[i], x[i])
            name = f"{r['kernel']} {r['op'][5:]} {mask} L={int(r['q_len'])} {dev}"
            out.append(_case(f"attention:{b}", name, float(pred), r["seconds"], tol, "s"))
    return out


def nccl_cases(tol: dict[str, float]) -> list[Case]:
    from dcpsim.cost_models.profile_table import read_profile

    prof = read_profile(DATA_DIR / "profile_h100.csv")
    coll = prof[prof["op"].isin(COLLECTIVES)]
    cal = default_calibration(get_gpu("h100"))
    out = []
    for r in coll.to_dict("records"):
        op, n, nbytes = str(r["op"]), int(r["group_size"]), int(r["bytes"])
        pred = cal.link(op, str(r["link"])).seconds(op, nbytes, n)
        out.append(_case("nccl", f"{op} n={n} {nbytes / 2**20:g} MiB", float(pred), r["seconds"], tol, "s"))
    return out


def _attention_only_s(model: ModelSpec, gpu: str, lengths: list[int], c: int, u: int, cal=None) -> float:
    """Forward + backward attention of one rank of a CP group of c (Ulysses u), one layer, no GEMMs, no ends."""
    job = JobSpec(model=model, gpu=get_gpu(gpu), tp=1, pp=1, pool=c, context_len=max(lengths),
                  global_batch_tokens=sum(lengths), max_tokens_per_rank=sum(lengths))
    cal = replace(cal or default_calibration(job.gpu), gemm=FREE, microbatch_overhead_fwd_s=0.0,
                  microbatch_overhead_bwd_s=0.0, layer_overhead_fwd_s=0.0, layer_overhead_bwd_s=0.0)
    cm = AnalyticCostModel(job, cal, CostTerms.parse("all,-lm_head"))
    n = len(lengths)
    gb = GroupBatch(np.asarray(lengths, dtype=np.int64), np.zeros(n, dtype=np.int64), np.array([c]),
                    np.array([u]), np.array([0]))
    return float(cm.group_costs(gb).total_s[0])


def cp_benchmark_cases(tol: dict[str, float]) -> list[Case]:
    model = ModelSpec("te-cp-benchmark", hidden=4096, ffn=14336, layers=1, heads=32, kv_heads=8, head_dim=128,
                      vocab=1)
    out = []
    for name, lengths in (("1x512K", [524288]), ("256x2K", [2048] * 256)):
        best = {c: min(_attention_only_s(model, "h100", lengths, c, u) for u in (1, 2, 4, 8)
                       if c % u == 0 and u <= model.kv_heads) for c in (2, 8)}
        speedup = best[2] / best[8]
        lo, hi = TE_RANGES[name]
        mid = (lo + hi) / 2
        err = 0.0 if lo <= speedup <= hi else (speedup - (lo if speedup < lo else hi)) / mid
        out.append(Case("cp_benchmark", f"{name} speed-up CP2 to CP8", speedup, mid, err, tol["cp_benchmark"],
                        "x", (lo, hi)))
    return out


def ring_attention_cases(tol: dict[str, float]) -> list[Case]:
    model = ModelSpec("llama3.1-8b-attention", hidden=4096, ffn=14336, layers=1, heads=32, kv_heads=8,
                      head_dim=128, vocab=1)
    cal = default_calibration(get_gpu("h100"))
    link = cal.comm["send_recv:nvlink"]
    h800 = replace(cal, comm=dict(cal.comm, **{"send_recv:nvlink": replace(
        link, busbw_gbs=link.busbw_gbs * H800_NVLINK_SCALE)}))
    L = 8 * 8192
    whole = _attention_only_s(model, "h100", [L], 8, 1, h800)
    compute = _attention_only_s(model, "h100", [L], 8, 1, replace(
        h800, comm={k: replace(v, base_s=0.0, hop_s=0.0, busbw_gbs=math.inf) for k, v in h800.comm.items()},
        ring_step_overhead_fwd_s=0.0, ring_step_overhead_bwd_s=0.0))
    return [_case("ring_attention", "zigzag ring, 8 GPUs, 8K tokens each: share of the ideal", compute / whole,
                  ZIGZAG_EFFICIENCY, tol, "fraction")]


def cp_scaling_cases(tol: dict[str, float]) -> list[Case]:
    import pandas as pd

    per_doc = pd.read_csv(REFERENCE / "attn_h100_per_doc_by_cp_tp.csv")
    curve = default_calibration(get_gpu("h100")).attn_fwd
    ref = per_doc[(per_doc["cp"] == 1) & (per_doc["tp"] == 1)].set_index("L")["duration_per_doc"]
    sel = per_doc[(per_doc["tp"] == 1) & (per_doc["cp"] > 1) & (per_doc["L"] >= 2048)]
    out = []
    for r in sel.to_dict("records"):
        L, c = float(r["L"]), float(r["cp"])
        measured = float(ref[int(L)]) / float(r["duration_per_doc"])
        model = c * float(curve.tflops(L / c)) / float(curve.tflops(L))
        out.append(_case("cp_scaling", f"L={int(L)} CP{int(c)} speed-up over CP1", model, measured, tol, "x"))
    return out


SUITES = {"attention": attention_cases, "nccl": nccl_cases, "cp_benchmark": cp_benchmark_cases,
          "ring_attention": ring_attention_cases, "cp_scaling": cp_scaling_cases}


def all_cases(suites: list[str] | None = None) -> list[Case]:
    tol = tolerances()
    return [c for s in (suites or list(SUITES)) for c in SUITES[s](tol)]


def suite_summaries(cases: list[Case]) -> list[dict]:
    """Per suite (sorted): its number of cases, median and maximum |error|, and tolerance."""
    import pandas as pd

    table = pd.DataFrame([c.to_dict() for c in cases]).assign(abs_error=lambda d: d["error"].abs())
    return [{"suite": str(suite), "cases": len(d), "median_abs_error": float(d["abs_error"].median()),
             "max_abs_error": float(d["abs_error"].max()), "tolerance": float(d["tolerance"].iloc[0])}
            for suite, d in table.groupby("suite", sort=True)]
