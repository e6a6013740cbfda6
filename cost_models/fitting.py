"""Fitting a :class:`~cost_models.calibration.Calibration` to a profile table (scipy least squares).

* Attention and GEMM: the saturating curve TFLOP/s(x) = peak · x / (x + half) of cost_models.calibration,
  fitted per (kernel, pass, causal, head_dim) group by minimising the *relative* time error. Start values come
  from the linearised form 1/TFLOP/s = 1/peak + (half/peak)·(1/x) (ordinary least squares), then
  ``scipy.optimize.least_squares`` refines them with peak > 0 and half ≥ 0.
* Causal backward: when a profile has no causal backward rows (the FlashAttention-3 paper publishes backward
  only without mask), the causal curve is derived: at each measured length the non-causal backward curve is
  multiplied by the causal / non-causal ratio of the *forward* curves of the same kernel and head dimension,
  and the saturating curve is fitted to those points. (The FlashAttention-2 paper's forward+backward figures
  show the same causal penalty as its forward alone, within a few percent; docs/calibration.md.)
* Collectives: the α–β model of :class:`~cost_models.calibration.LinkModel`, t = base + hops·hop +
  bytes·factor / busbw, linear in (base, hop, 1/busbw); solved per (op, link) by non-negative least squares on
  relative errors (``scipy.optimize.lsq_linear``). With a single group size, hop keeps the base value. Where
  the times do not grow with bytes (a loaded machine's noise), the bandwidth is the median of the other
  collectives fitted on that link in the same profile (else the base's), the latencies are fitted with it,
  and :attr:`FitReport.warnings` says so.

* Fixed costs (per layer, per ring step) from ``layer_*`` and ``ring_*`` rows: cost_models.fit_overheads.

Terms absent from the profile keep the ``base`` calibration's values. Fitted numbers are rounded to 6
significant digits so that the JSON is stable across platforms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, lsq_linear

from dcpsim.cost_models.attention_backends import backend_of_kernel
from dcpsim.cost_models.calibration import (
    ATTENTION_KEYS,
    COLLECTIVES,
    AttentionCurves,
    Calibration,
    LinkModel,
    SaturatingCurve,
)
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.fit_overheads import fit_layer_overhead, fit_ring_overhead
from dcpsim.cost_models.fit_report import FitReport, GroupKey, OpFit, abs_rel_errors, round_sig
from dcpsim.cost_models.fixed_costs import FIELDS as FIXED_FIELDS
from dcpsim.cost_models.flops import ATTENTION_BWD_FACTOR
from dcpsim.cost_models.profile_table import ATTENTION_OPS, FWD_BWD_OP, row_flops, row_size


# ---- saturating curves ------------------------------------------------------------------------------------
def fit_saturating(x: np.ndarray, flops: np.ndarray, seconds: np.ndarray) -> SaturatingCurve:
    """Fit peak (TFLOP/s) and half (size units) of the saturating curve to calls of ``flops`` at size ``x``
    taking ``seconds``; relative least squares. One point (or a single size) fixes half = 0."""
    x, flops, seconds = (np.asarray(a, dtype=np.float64) for a in (x, flops, seconds))
    tf = flops / seconds / 1e12
    if x.size == 0:
        raise CalibrationError("cannot fit a curve to no rows")
    if x.size == 1 or np.ptp(x) == 0:
        return SaturatingCurve(round_sig(float(np.exp(np.mean(np.log(tf))))), 0.0)
    slope, icpt = np.polyfit(1.0 / x, 1.0 / tf, 1)  # 1/tf = 1/peak + (half/peak)/x
    p0 = 1.0 / icpt if icpt > 0 else float(tf.max())
    h0 = max(slope * p0, 0.0)

    def resid(p: np.ndarray) -> np.ndarray:
        peak, half = p
        return flops * (x + half) / (peak * 1e12 * x) / seconds - 1.0

    sol = least_squares(resid, x0=[p0, h0], bounds=([1e-9, 0.0], [np.inf, np.inf]),
                        x_scale=[p0, max(h0, 1.0)], method="trf")
    return SaturatingCurve(round_sig(float(sol.x[0])), round_sig(float(sol.x[1])))


def fit_hill(x: np.ndarray, flops: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float]:
    """A 3-parameter alternative, TFLOP/s = peak · x^k / (x^k + half^k), fitted the same way; used only to
    check whether the 2-parameter curve leaves accuracy on the table (docs/calibration.md)."""
    x, flops, seconds = (np.asarray(a, dtype=np.float64) for a in (x, flops, seconds))
    c = fit_saturating(x, flops, seconds)

    def resid(p: np.ndarray) -> np.ndarray:
        peak, half, k = p
        tf = peak * x**k / (x**k + half**k)
        return flops / (tf * 1e12) / seconds - 1.0

    sol = least_squares(resid, x0=[c.peak_tflops, max(c.half, 1.0), 1.0],
                        bounds=([1e-9, 1e-9, 0.2], [np.inf, np.inf, 5.0]), method="trf")
    return float(sol.x[0]), float(sol.x[1]), float(sol.x[2])


def _hill_seconds(p: tuple[float, float, float], x: np.ndarray, flops: np.ndarray) -> np.ndarray:
    peak, half, k = p
    return flops / (peak * x**k / (x**k + half**k) * 1e12)


def attention_groups(df: pd.DataFrame) -> dict[GroupKey, pd.DataFrame]:
    """Attention rows by (kernel, op, causal, head_dim), in sorted key order."""
    att = df[df["op"].isin(ATTENTION_OPS)]
    out: dict[GroupKey, pd.DataFrame] = {}
    for key, g in att.groupby(["kernel", "op", "causal", "head_dim"], sort=True):
        out[(str(key[0]), str(key[1]), int(key[2]), int(key[3]))] = g
    return out


def _fit_rows(g: pd.DataFrame) -> SaturatingCurve:
    return fit_saturating(row_size(g), row_flops(g), g["seconds"].to_numpy())


def loo_errors(df: pd.DataFrame, form: str = "saturating") -> pd.DataFrame:
    """Leave-one-out over the attention rows: each row is predicted by the curve of its group fitted without
    it. Returns kernel, op, causal, head_dim, size, measured and predicted seconds, and the relative error."""
    recs = []
    for key, g in attention_groups(df).items():
        if len(g) < 3:
            continue
        x, fl, s = row_size(g), row_flops(g), g["seconds"].to_numpy()
        for i in range(len(g)):
            keep = np.arange(len(g)) != i
            if form == "saturating":
                pred = float(fit_saturating(x[keep], fl[keep], s[keep]).seconds(fl[i], x[i]))
            elif form == "hill":
                pred = float(_hill_seconds(fit_hill(x[keep], fl[keep], s[keep]), x[i], fl[i]))
            else:
                raise ValueError(f"unknown curve form {form!r}")
            recs.append(dict(zip(("kernel", "op", "causal", "head_dim"), key), size=x[i], measured_s=s[i],
                             predicted_s=pred, rel_error=pred / s[i] - 1.0))
    return pd.DataFrame(recs)


def loo_summary(df: pd.DataFrame, form: str = "saturating") -> dict[str, float]:
    """Median absolute leave-one-out error per kernel (fraction)."""
    e = loo_errors(df, form)
    if e.empty:
        return {}
    med = e.assign(abs_error=e["rel_error"].abs()).groupby("kernel")["abs_error"].median()
    return {str(k): float(v) for k, v in med.items()}


# ---- collectives ----------------------------------------------------------------------------------------
def factor_and_hops(op: str, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bus-bandwidth factor and hop count of ``op`` over n ranks, as in LinkModel.seconds."""
    probe = LinkModel(base_s=0.0, hop_s=1.0, busbw_gbs=1e-9)  # seconds = hops + bytes·factor
    hops = probe.seconds(op, 0.0, n)
    factor = LinkModel(base_s=0.0, hop_s=0.0, busbw_gbs=1e-9).seconds(op, 1.0, n)
    return factor, hops


def fit_link(op: str, nbytes: np.ndarray, n: np.ndarray, seconds: np.ndarray, base: LinkModel,
             busbw_gbs: float | None = None) -> LinkModel:
    """Fit base_s, hop_s and busbw_gbs of one collective on one link class (non-negative, relative errors).
    With a single group size hop_s keeps ``base.hop_s``; with a single buffer size busbw keeps the base;
    ``busbw_gbs`` given: the bandwidth is that, and only the latencies are fitted."""
    nbytes, n, seconds = (np.asarray(a, dtype=np.float64) for a in (nbytes, n, seconds))
    factor, hops = factor_and_hops(op, n)
    cols, names = [np.ones_like(seconds)], ["base"]
    known = np.zeros_like(seconds)
    if np.unique(hops).size > 1:
        cols.append(hops)
        names.append("hop")
    else:
        known += hops * base.hop_s
    if busbw_gbs is None and np.unique(nbytes * factor).size > 1:
        cols.append(nbytes * factor / 1e9)
        names.append("inv_bw")
    else:
        busbw_gbs = busbw_gbs or base.busbw_gbs
        known += nbytes * factor / (busbw_gbs * 1e9)
    A = np.stack(cols, axis=1) / seconds[:, None]
    b = (seconds - known) / seconds
    sol = lsq_linear(A, b, bounds=(0.0, np.inf), method="bvls")
    p = dict(zip(names, sol.x))
    inv_bw = p.get("inv_bw", 1.0 / (busbw_gbs or base.busbw_gbs))
    if inv_bw <= 0:
        raise CalibrationError(f"{op}: the measured times do not grow with bytes; cannot fit a bandwidth")
    return LinkModel(base_s=round_sig(p["base"]), hop_s=round_sig(p.get("hop", base.hop_s)),
                     busbw_gbs=round_sig(1.0 / inv_bw))


# ---- attention backends (cost_models.attention_backends) ---------------------------------------------
def _ratio_fit(x: np.ndarray, num: SaturatingCurve, a: SaturatingCurve, b: SaturatingCurve) -> SaturatingCurve:
    """The curve through num(x) · a(x) / b(x) (TFLOP/s) at the sizes x."""
    tf = num.tflops(x) * a.tflops(x) / b.tflops(x)
    return fit_saturating(x, tf * 1e12, np.ones_like(x))


def fit_backends(curves: Mapping[tuple[str, str, int], SaturatingCurve],
                 sizes: Mapping[tuple[str, str, int], np.ndarray],
                 fwd_bwd: Mapping[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
                 ) -> dict[str, AttentionCurves]:
    """Backends from fitted groups ``curves[(kernel, op, causal)]`` (one head dimension) and the sizes each
    group was measured at. Per backend the kernel with the most measured (pass, mask) keys wins.
    ``fwd_bwd[(kernel, causal)]`` = (sizes, forward FLOPs, seconds) of ``attn_fwd_bwd`` rows: a missing
    backward of that mask is fitted to their time minus the forward curve's.

    Every (pass, mask) the profile measures is fitted; a missing one is derived from the most completely
    measured backend's ratio at the same lengths (missing causal backward: own full backward × own causal/full
    forward ratio, as :func:`fit_calibration` does for FA3; missing full forward: own causal forward ×
    reference full/causal forward; missing backward: own forward × reference backward/forward).
    :attr:`AttentionCurves.derived` lists which."""
    fwd_bwd = fwd_bwd or {}
    name = {("attn_fwd", 1): "fwd_causal", ("attn_bwd", 1): "bwd_causal", ("attn_fwd", 0): "fwd_full",
            ("attn_bwd", 0): "bwd_full"}
    per_kernel: dict[str, dict[str, SaturatingCurve]] = {}
    x_of: dict[str, np.ndarray] = {}
    for (kernel, op, causal), c in sorted(curves.items()):
        per_kernel.setdefault(kernel, {})[name[(op, causal)]] = c
        x_of[kernel] = np.union1d(x_of.get(kernel, np.zeros(0)), sizes[(kernel, op, causal)])
    chosen: dict[str, str] = {}
    for kernel in sorted(per_kernel):
        b = backend_of_kernel(kernel)
        if b is None:
            continue
        if b not in chosen or len(per_kernel[kernel]) > len(per_kernel[chosen[b]]):
            chosen[b] = kernel
    if not chosen:
        return {}
    full = [k for k in chosen.values() if {"fwd_causal", "fwd_full", "bwd_full"} <= set(per_kernel[k])]
    ref = per_kernel[max(full, key=lambda k: (len(per_kernel[k]), k))] if full else None
    out: dict[str, AttentionCurves] = {}
    for b, kernel in sorted(chosen.items()):
        have = dict(per_kernel[kernel])
        x = x_of[kernel]
        derived = []
        if "fwd_causal" not in have:
            continue  # a backend is defined by its causal forward
        if "fwd_full" not in have and ref is not None:
            have["fwd_full"] = _ratio_fit(x, have["fwd_causal"], ref["fwd_full"], ref["fwd_causal"])
            derived.append("fwd_full")
        for causal, key, fkey in ((1, "bwd_causal", "fwd_causal"), (0, "bwd_full", "fwd_full")):
            if key not in have and fkey in have and (kernel, causal) in fwd_bwd:
                xs, fl, sec = fwd_bwd[(kernel, causal)]
                bwd_s = sec - have[fkey].seconds(fl, xs)
                if np.all(bwd_s > 0):
                    have[key] = fit_saturating(xs, ATTENTION_BWD_FACTOR * fl, bwd_s)
                    derived.append(f"{key} = fwd+bwd - fwd")
        if "bwd_full" not in have and ref is not None and "fwd_full" in have:
            have["bwd_full"] = _ratio_fit(x, have["fwd_full"], ref["bwd_full"], ref["fwd_full"])
            derived.append("bwd_full")
        if "bwd_causal" not in have and {"bwd_full", "fwd_full"} <= set(have):
            have["bwd_causal"] = _ratio_fit(x, have["bwd_full"], have["fwd_causal"], have["fwd_full"])
            derived.append("bwd_causal")
        if not set(ATTENTION_KEYS) <= set(have):
            continue
        out[b] = AttentionCurves(kernel, derived=tuple(derived), **{k: have[k] for k in ATTENTION_KEYS})
    return out


# ---- the whole calibration ------------------------------------------------------------------------------
def _choose(df: pd.DataFrame, kernel: str | None, head_dim: int | None) -> tuple[str | None, int | None]:
    att = df[df["op"].isin(ATTENTION_OPS)]
    if att.empty:
        return kernel, head_dim
    if kernel is None:
        counts = att["kernel"].value_counts()
        kernel = str(min(counts.index, key=lambda k: (-counts[k], k)))
    elif kernel not in set(att["kernel"]):
        raise CalibrationError(f"no attention rows of kernel {kernel!r}; the profile has "
                               f"{', '.join(sorted(map(repr, set(att['kernel']))))}")
    mine = att[att["kernel"] == kernel]
    if head_dim is None:
        counts = mine["head_dim"].value_counts()
        head_dim = int(min(counts.index, key=lambda d: (-counts[d], d)))
    elif head_dim not in set(mine["head_dim"].astype(int)):
        raise CalibrationError(f"no attention rows of kernel {kernel!r} with head_dim {head_dim}; it has "
                               f"{', '.join(map(str, sorted(set(mine['head_dim'].astype(int)))))}")
    return kernel, head_dim


def _curve_term(key: str, g: pd.DataFrame, curve: SaturatingCurve, how: str, note: str = "") -> OpFit:
    ape = abs_rel_errors(curve.seconds(row_flops(g), row_size(g)), g["seconds"].to_numpy())
    return OpFit(key, how, {"peak_tflops": curve.peak_tflops, "half": curve.half}, len(g), float(ape.mean()),
                 float(ape.max()), note)


def _derive_causal_bwd(groups: dict[GroupKey, SaturatingCurve], rows: dict[GroupKey, pd.DataFrame],
                       kernel: str, d: int) -> SaturatingCurve | None:
    need = [(kernel, "attn_bwd", 0, d), (kernel, "attn_fwd", 1, d), (kernel, "attn_fwd", 0, d)]
    if not all(k in groups for k in need):
        return None
    bn, fc, fn = (groups[k] for k in need)
    return _ratio_fit(np.unique(row_size(rows[need[0]])), bn, fc, fn)


def _link_term(key: str, op: str, g: pd.DataFrame, lm: LinkModel, how: str, note: str) -> OpFit:
    nbytes, n = g["bytes"].to_numpy(np.float64), g["group_size"].to_numpy(np.float64)
    ape = abs_rel_errors(lm.seconds(op, nbytes, n), g["seconds"].to_numpy())
    return OpFit(key, how, {"base_s": lm.base_s, "hop_s": lm.hop_s, "busbw_gbs": lm.busbw_gbs}, len(g),
                 float(ape.mean()), float(ape.max()), note)


def fit_calibration(profile: pd.DataFrame, base: Calibration, name: str, *, kernel: str | None = None,
                    head_dim: int | None = None) -> tuple[Calibration, FitReport]:
    """Fit the terms a validated profile measures; keep ``base`` for the others.

    ``kernel`` and ``head_dim`` choose the attention rows that set ``attn_fwd`` / ``attn_bwd`` (default: the
    kernel with most attention rows, then its most common head dimension). Every attention group is fitted
    too (``FitReport.groups``) and checked by leave-one-out.
    """
    kernel, d = _choose(profile, kernel, head_dim)
    rows = attention_groups(profile)
    groups = {k: _fit_rows(g) for k, g in rows.items()}
    group_mape = {k: float(abs_rel_errors(c.seconds(row_flops(rows[k]), row_size(rows[k])), rows[k]["seconds"]).mean())
                  for k, c in groups.items()}
    terms: list[OpFit] = []
    fwd, bwd = base.attn_fwd, base.attn_bwd
    kfc, kbc = (kernel, "attn_fwd", 1, d), (kernel, "attn_bwd", 1, d)
    fitted_rows: dict[str, pd.DataFrame] = {}  # the rows of each fitted curve term (checked below for one size)
    if kfc in groups:
        fwd = groups[kfc]
        fitted_rows["attn_fwd"] = rows[kfc]
        terms.append(_curve_term("attn_fwd", rows[kfc], fwd, "fitted", f"{kernel} causal d{d}"))
    else:
        terms.append(OpFit("attn_fwd", "base", {"peak_tflops": fwd.peak_tflops, "half": fwd.half},
                           note=f"no causal rows; from {base.name}"))
    derived = (None if kbc in groups else _derive_causal_bwd(groups, rows, kernel, d)
               if kernel and d is not None else None)
    if kbc in groups:
        bwd = groups[kbc]
        fitted_rows["attn_bwd"] = rows[kbc]
        terms.append(_curve_term("attn_bwd", rows[kbc], bwd, "fitted", f"{kernel} causal d{d}"))
    elif derived is not None:
        bwd = derived
        kbn = (kernel, "attn_bwd", 0, d)
        # type: ignore: a derived curve exists only when kernel and d are set (mypy sees str | None, int | None)
        t = _curve_term("attn_bwd", rows[kbn], groups[kbn], "derived")  # type: ignore[index]
        terms.append(replace(t, params={"peak_tflops": bwd.peak_tflops, "half": bwd.half},
                             note=f"{kernel} d{d} full bwd x causal/full fwd (errors: full bwd)"))
    else:
        terms.append(OpFit("attn_bwd", "base", {"peak_tflops": bwd.peak_tflops, "half": bwd.half},
                           note=f"no causal rows; from {base.name}"))
    gemm = base.gemm
    g_rows = profile[profile["op"] == "gemm"]
    if len(g_rows):
        gemm = _fit_rows(g_rows)
        fitted_rows["gemm"] = g_rows
        terms.append(_curve_term("gemm", g_rows, gemm, "fitted"))
    else:
        terms.append(OpFit("gemm", "base", {"peak_tflops": gemm.peak_tflops, "half": gemm.half},
                           note=f"not profiled; from {base.name}"))
    comm = dict(base.comm)
    warnings: list[str] = []
    coll = profile[profile["op"].isin(COLLECTIVES)]
    failed: list[tuple[str, str, pd.DataFrame, str]] = []
    for (op, link), g in coll.groupby(["op", "link"], sort=True):
        key = f"{op}:{link}"
        b = comm.get(key) or base.link(op, link)
        try:
            lm = fit_link(op, g["bytes"].to_numpy(np.float64), g["group_size"].to_numpy(np.float64),
                          g["seconds"].to_numpy(), b)
        except CalibrationError as e:  # timing noise (a loaded machine): fitted below from the same profile
            failed.append((str(op), str(link), g, str(e).split(": ", 1)[-1]))
            continue
        comm[key] = lm
        terms.append(_link_term(key, op, g, lm, "fitted",
                                f"n = {', '.join(map(str, sorted(set(g['group_size'].astype(int)))))}"))
    fitted_bw = {t.key: t.params["busbw_gbs"] for t in terms if t.how == "fitted" and t.key.count(":")}
    for op, link, g, reason in failed:
        # the times do not resolve a bandwidth (a loaded machine's noise dwarfs the bytes' share): the median
        # bandwidth the same profile fitted for the other collectives on this link, else the base's; the
        # latencies (the wait a loaded machine adds to every call) are fitted to these rows with it
        key = f"{op}:{link}"
        b = comm.get(key) or base.link(op, link)
        same_link = sorted(v for k, v in fitted_bw.items() if k.endswith(":" + link))
        if same_link:
            bw = round_sig(float(np.median(same_link)))
            src = f"the median of this profile's {len(same_link)} fitted {link} collective(s)"
        else:
            bw, src = b.busbw_gbs, f"{base.name}'s {key}"
        lm = fit_link(op, g["bytes"].to_numpy(np.float64), g["group_size"].to_numpy(np.float64),
                      g["seconds"].to_numpy(), b, busbw_gbs=bw)
        why = (f"{key}: {reason} ({len(g)} rows; timing noise?): bandwidth {bw:.4g} GB/s from {src}, "
               f"latency fitted ({lm.base_s:.3g} s)")
        warnings.append(why)
        comm[key] = lm
        terms.append(_link_term(key, op, g, lm, "derived", why))
    fitted_keys = {t.key for t in terms if t.key.count(":")}
    for key in sorted(comm):
        if key not in fitted_keys:
            lm = comm[key]
            params = {"base_s": lm.base_s, "hop_s": lm.hop_s, "busbw_gbs": lm.busbw_gbs}
            terms.append(OpFit(key, "base", params, note=f"not profiled; from {base.name}"))
    sources = sorted({s for s in profile["source"] if s})
    src = (f"fit of {len(profile)} profile rows by dcpsim calibrate"
           + (f" (attention: {kernel}, head_dim {d})" if kernel else "")
           + f"; terms not in the profile from {base.name}"
           + (f"; profile sources: {' | '.join(sources)}" if sources else ""))
    cal = Calibration(name=name, attn_fwd=fwd, attn_bwd=bwd, gemm=gemm, comm=dict(sorted(comm.items())),
                      source=src, **{f: getattr(base, f) for f in FIXED_FIELDS})
    backends = dict(base.attention)
    fitted_backends: dict[str, AttentionCurves] = {}
    if d is not None:
        mine = {(k[0], k[1], k[2]): c for k, c in groups.items() if k[3] == d}
        fb = profile[(profile["op"] == FWD_BWD_OP) & (profile["head_dim"] == d)]
        fwd_bwd = {(str(k), int(c)): (row_size(g), row_flops(g) / (1 + ATTENTION_BWD_FACTOR),
                                      g["seconds"].to_numpy(np.float64))
                   for (k, c), g in fb.groupby(["kernel", "causal"], sort=True)}
        fitted_backends = fit_backends(mine, {(k[0], k[1], k[2]): np.unique(row_size(rows[k]))
                                              for k in groups if k[3] == d}, fwd_bwd)
        backends.update(fitted_backends)
    cal = replace(cal, attention=dict(sorted(backends.items())))
    profiled = {backend_of_kernel(k[0]) for k in groups}
    for backend, ac in sorted(backends.items()):
        params = {"peak_tflops": ac.fwd_causal.peak_tflops, "half": ac.fwd_causal.half}
        if backend in fitted_backends:   # what was written: the fitted curves, or the base's where none fit
            note = f"causal forward of kernel {ac.kernel} d{d}; derived: {', '.join(ac.derived) or 'none'}"
            terms.append(OpFit(f"attention:{backend}", "fitted", params, note=note))
        else:
            why = (f"the profile's rows do not give all four curves (causal forward, and a full forward and "
                   f"backward to derive from); from {base.name}" if backend in profiled
                   else f"not profiled; from {base.name}")
            terms.append(OpFit(f"attention:{backend}", "base", params, note=why))
    for t in terms:
        g = fitted_rows.get(t.key)
        if t.how == "fitted" and g is not None and np.unique(row_size(g)).size < 2:
            warnings.append(f"{t.key}: {t.rows} profile row(s) at one size fix only the peak "
                            f"({t.params['peak_tflops']:g} TFLOP/s); the half-saturation size is set to 0 "
                            f"(no slowdown of small calls): profile at least two sizes")
    cal, layer_terms = fit_layer_overhead(profile, cal)
    cal, ring_terms = fit_ring_overhead(profile, cal)
    layer_terms = layer_terms + ring_terms
    terms[3:3] = layer_terms  # after attn_fwd, attn_bwd, gemm; before the collectives
    report = FitReport(name, kernel, d, tuple(terms), groups, group_mape, loo_summary(profile), tuple(warnings))
    return cal, report


def cp_scaling_check(per_doc: pd.DataFrame, curve: SaturatingCurve) -> pd.DataFrame:
    """Compare measured CP / TP speed-ups of one document's attention with the model's.

    ``per_doc`` has columns L, cp, tp and a time; speed-ups are relative to cp = tp = 1 at the same L, so
    absolute numbers (and the unknown head configuration) cancel. The model (cost_models.analytic, ring with
    dual-chunk balancing): c ranks each do 1/c of the FLOPs at block length L/c, so the CP speed-up is
    c · eff(L/c) / eff(L); TP splits heads and keeps the block, a speed-up of exactly t.
    """
    tcol = next(c for c in per_doc.columns if c not in ("L", "cp", "tp"))
    ref = per_doc[(per_doc["cp"] == 1) & (per_doc["tp"] == 1)].set_index("L")[tcol]
    L = per_doc["L"].to_numpy(np.float64)
    c = per_doc["cp"].to_numpy(np.float64)
    t = per_doc["tp"].to_numpy(np.float64)
    measured = ref.reindex(per_doc["L"]).to_numpy() / per_doc[tcol].to_numpy(np.float64)
    model = c * t * curve.tflops(L / c) / curve.tflops(L)
    return pd.DataFrame({"L": per_doc["L"].to_numpy(), "cp": per_doc["cp"].to_numpy(),
                         "tp": per_doc["tp"].to_numpy(), "measured_speedup": measured,
                         "model_speedup": model, "ratio": model / measured})
