"""The fixed costs of the analytic model fitted from whole-layer and ring profile rows (cost_models.fixed_costs).

* Per-layer overhead: with ``layer_fwd`` / ``layer_bwd`` rows (one whole decoder layer on one rank),
  each row's kernel time is predicted by :meth:`AnalyticCostModel.group_costs` for a one-layer job of the
  row's shape with the curves cost_models.fitting fitted and no overhead (so no formula is duplicated here); the
  overhead of a pass is the constant c ≥ 0 minimising Σ ((predicted + c) / measured − 1)², the relative least-squares
  intercept c = Σ (r/m²) / Σ (1/m²) of the residuals r = measured − predicted, clipped at 0. Relative
  weighting lets the short layers, where the overhead dominates, set it.
* Per-ring-step cost: with ``ring_fwd`` / ``ring_bwd`` rows (one layer's ring CP attention on one rank), the
  model's attention plus exposed transfers of each row (no fixed costs) is predicted the same way, and the
  cost per ring step is the c ≥ 0 minimising Σ ((predicted + c·(r − 1)) / measured − 1)².
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from dcpsim.cost_models.analytic import AnalyticCostModel
from dcpsim.cost_models.attention_backends import backend_of_kernel
from dcpsim.cost_models.base import GroupBatch
from dcpsim.cost_models.calibration import Calibration, SaturatingCurve
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.fit_report import OpFit, abs_rel_errors, round_sig
from dcpsim.cost_models.presets import get_gpu
from dcpsim.cost_models.profile_table import LAYER_OPS, RING_OPS
from dcpsim.cost_models.specs import JobSpec, ModelSpec
from dcpsim.cost_models.terms import CostTerms


# ---- fixed per-layer overhead -----------------------------------------------------------------------------
def layer_kernel_seconds(rows: pd.DataFrame, cal: Calibration) -> tuple[np.ndarray, np.ndarray]:
    """The analytic model's forward and backward compute seconds of each layer row (one layer, one rank,
    one causal document of ``tokens`` tokens), with ``cal``'s curves and no per-layer overhead."""
    kernels = cal.without_fixed_costs()
    layers_only = CostTerms.legacy()  # the row's own kernels: no LM head, no fixed costs, the calibration's curves
    fwd, bwd = np.zeros(len(rows)), np.zeros(len(rows))
    shape_cols = ["in_features", "out_features", "heads", "kv_heads", "head_dim"]
    pos = np.arange(len(rows))
    for (h, f, a, g, d), idx in rows.reset_index(drop=True).groupby(shape_cols, sort=True).groups.items():
        tokens = rows["tokens"].to_numpy(np.int64)[pos[idx]]
        model = ModelSpec("profiled-layer", hidden=int(h), ffn=int(f), layers=1, heads=int(a), kv_heads=int(g),
                          head_dim=int(d), vocab=1)
        top = int(tokens.max())
        job = JobSpec(model=model, gpu=get_gpu("h100"), tp=1, pp=1, pool=1, context_len=top,
                      global_batch_tokens=top, max_tokens_per_rank=top)  # the GPU only sets links: unused
        n = len(tokens)
        one_each = GroupBatch(seq_len=tokens, seq_group=np.arange(n), size=np.ones(n, np.int64),
                              ulysses=np.ones(n, np.int64), first_rank=np.zeros(n, np.int64))
        costs = AnalyticCostModel(job, kernels, layers_only).group_costs(one_each)
        fwd[pos[idx]], bwd[pos[idx]] = costs.fwd_compute_s, costs.bwd_compute_s
    return fwd, bwd


def fit_overhead(predicted: np.ndarray, measured: np.ndarray) -> float:
    """The constant c ≥ 0 (seconds) minimising Σ ((predicted + c) / measured − 1)²: one "step" per row."""
    return fit_step_overhead(predicted, measured, np.ones(np.shape(measured)))


def fit_layer_overhead(profile: pd.DataFrame, cal: Calibration) -> tuple[Calibration, list[OpFit]]:
    """``cal`` with the per-layer overheads fitted to the profile's layer rows (unchanged without any)."""
    terms, fitted = [], {}
    for op in LAYER_OPS:
        key = f"layer_overhead_{op[6:]}_s"
        rows = profile[profile["op"] == op]
        if rows.empty:
            terms.append(OpFit(key, "base", {"seconds": getattr(cal, key)}, note=f"no {op} rows"))
            continue
        pred = layer_kernel_seconds(rows, cal)[0 if op == "layer_fwd" else 1]
        meas = rows["seconds"].to_numpy(np.float64)
        c = fit_overhead(pred, meas)
        fitted[key] = c
        ape = abs_rel_errors(pred + c, meas)
        share = float(np.median(c / meas))
        terms.append(OpFit(key, "fitted", {"seconds": c}, len(rows), float(ape.mean()), float(ape.max()),
                           f"kernels alone MAPE {abs_rel_errors(pred, meas).mean():.0%}; median share of layer time "
                           f"{share:.0%}; tokens {', '.join(map(str, sorted(set(rows['tokens'].astype(int)))))}"))
    return replace(cal, **fitted), terms  # type: ignore[arg-type]  # fitted: fixed-cost fields only


# ---- fixed per-ring-step cost ------------------------------------------------------------------------------
def ring_kernel_seconds(rows: pd.DataFrame, cal: Calibration) -> tuple[np.ndarray, np.ndarray]:
    """The analytic model's forward and backward seconds of each ring row (one layer, one rank of a ring of
    ``group_size``, one causal document of ``tokens`` tokens): attention plus exposed transfers, with
    ``cal``'s curves and links and no fixed costs."""
    if (rows["link"] != "nvlink").any():
        raise CalibrationError("ring rows over network links are not fitted yet; give link = nvlink rows "
                               "(a ring inside one node)")
    kernels = replace(cal.without_fixed_costs(), gemm=SaturatingCurve(math.inf, 0.0))
    fwd, bwd = np.zeros(len(rows)), np.zeros(len(rows))
    for i, r in enumerate(rows.to_dict("records")):
        a, g, d, n, c = (int(r[k]) for k in ("heads", "kv_heads", "head_dim", "tokens", "group_size"))
        model = ModelSpec("profiled-ring", hidden=a * d, ffn=1, layers=1, heads=a, kv_heads=g, head_dim=d, vocab=1)
        backend = backend_of_kernel(r["kernel"]) if r["kernel"] else None
        backend = backend if backend in cal.attention else None  # else the calibration's single curve
        job = JobSpec(model=model, gpu=get_gpu("h100"), tp=1, pp=1, pool=c, context_len=n, global_batch_tokens=n,
                      max_tokens_per_rank=n, attention_backend=backend)  # ≤ 8 ranks of TP 1: one node, NVLink
        one = GroupBatch(np.array([n]), np.array([0]), np.array([c]), np.array([1]), np.array([0]))
        terms = CostTerms.parse("legacy,+attention_backend" if backend else "legacy")
        gc = AnalyticCostModel(job, kernels, terms).group_costs(one)
        fwd[i], bwd[i] = gc.fwd_compute_s[0] + gc.fwd_comm_s[0], gc.bwd_compute_s[0] + gc.bwd_comm_s[0]
    return fwd, bwd


def fit_step_overhead(predicted: np.ndarray, measured: np.ndarray, steps: np.ndarray) -> float:
    """The constant c ≥ 0 (seconds per step) minimising Σ ((predicted + c·steps) / measured − 1)²."""
    p, m, k = (np.asarray(a, dtype=np.float64) for a in (predicted, measured, steps))
    c = float(np.sum((m - p) * k / m**2) / max(float(np.sum(k * k / m**2)), 1e-300))
    return round_sig(max(c, 0.0))


def fit_ring_overhead(profile: pd.DataFrame, cal: Calibration) -> tuple[Calibration, list[OpFit]]:
    """``cal`` with the per-ring-step costs fitted to the profile's ring rows (unchanged without any)."""
    terms, fitted = [], {}
    for op in RING_OPS:
        key = f"ring_step_overhead_{op[5:]}_s"
        rows = profile[profile["op"] == op]
        if rows.empty:
            terms.append(OpFit(key, "base", {"seconds": getattr(cal, key)}, note=f"no {op} rows"))
            continue
        pred = ring_kernel_seconds(rows, cal)[0 if op == "ring_fwd" else 1]
        meas = rows["seconds"].to_numpy(np.float64)
        steps = rows["group_size"].to_numpy(np.float64) - 1
        c = fit_step_overhead(pred, meas, steps)
        fitted[key] = c
        ape = abs_rel_errors(pred + c * steps, meas)
        terms.append(OpFit(key, "fitted", {"seconds": c}, len(rows), float(ape.mean()), float(ape.max()),
                           f"model without it MAPE {abs_rel_errors(pred, meas).mean():.0%}; ring sizes "
                           f"{', '.join(map(str, sorted(set(rows['group_size'].astype(int)))))}"))
    return replace(cal, **fitted), terms  # type: ignore[arg-type]  # fitted: fixed-cost fields only
