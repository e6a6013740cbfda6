"""Fit a calibration's in-framework efficiency parameters to measured steps (``dcpsim calibrate --runs``).

The parameters ("knobs") are what :class:`Calibration` exposes, each bounded to a physical range:

* ``gemm_peak_tflops``: the GEMM curve's peak, 20–95 % of the GPU's dense BF16 peak;
* ``attention_scale``: one factor on every attention curve's peak (the single causal curves and each
  backend's), its largest peak kept within 20–95 % of the GPU's dense BF16 peak;
* ``nvlink_scale`` / ``network_scale``: one factor on every NVLink (network) collective's bus bandwidth, the
  largest kept within 10–122 % of the GPU spec's NCCL rate (122 %: NVLink 4's 450 GB/s data-sheet rate over the
  370 GB/s NCCL achieves on it, the presets' efficiency);
* ``layer_overhead_s``: the fixed forward cost per layer per microbatch (the backward keeps its ratio to it),
  0–2 ms;
* ``microbatch_overhead_s``: the fixed cost per microbatch per stage, forward and backward each, 0–50 ms.

Least squares on log(predicted / measured) over every iteration, with a weak pull of each knob towards its
starting value (``prior`` × its log change, or × its change over the range width for seconds) so that knobs the
data cannot tell apart (e.g. GEMM peak and NVLink bandwidth, both ∝ tokens × layers at fixed TP) stay where the
kernel fit put them. The prediction is linearised per knob: the simulated time is a sum of terms each ∝ 1/value
(peaks, bandwidths) or ∝ value (fixed costs) on the critical path, so its slope per knob comes from one extra
simulation per knob and iteration; the fit is redone around the result (``rounds``), and every reported error
comes from full simulations at the fitted values. k-fold cross-validation refits on k − 1 folds of every
dataset's iterations and predicts the held-out fold.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dcpsim.cost_models import Calibration, GPUSpec
from dcpsim.experiments.replay.replay import cost_model_of, predict
from dcpsim.experiments.replay.runlog import LogError, RunLog
from dcpsim.experiments.replay.stats import ErrorStats, error_stats, kfold_indices

NVLINK_HEADROOM = 450.0 / 370.0  # NVLink 4 data sheet per direction / NCCL-achieved bus bandwidth (presets)


@dataclass(frozen=True)
class Knob:
    name: str
    inverse: bool  # time ∝ 1 / value (a peak, a bandwidth) rather than ∝ value (seconds)
    start: Callable[[dict], float]
    apply: Callable[[dict, dict, float], None]  # (base dict, dict to write, value)
    bounds: Callable[[dict, GPUSpec], tuple[float, float]]
    step: float = 0.0  # finite-difference step for a value near 0 (seconds)


def _sig(v: float) -> float:
    """``v`` to 6 significant digits (as the kernel fit writes its numbers)."""
    return float(f"{v:.6g}")


def _peaks(d: dict) -> list[dict]:
    curves = [d["attn_fwd"], d["attn_bwd"]]
    for backend in d.get("attention", {}).values():
        curves += [c for c in backend.values() if isinstance(c, dict) and "peak_tflops" in c]
    return curves


def _scale_attention(base: dict, out: dict, v: float) -> None:
    for b, o in zip(_peaks(base), _peaks(out)):
        o["peak_tflops"] = _sig(b["peak_tflops"] * v)


def _scale_links(link: str) -> Callable[[dict, dict, float], None]:
    def apply(base: dict, out: dict, v: float) -> None:
        for k, m in base["comm"].items():
            if k.endswith(":" + link):
                out["comm"][k]["busbw_gbs"] = _sig(m["busbw_gbs"] * v)
    return apply


def _link_bounds(link: str, rate: Callable[[GPUSpec], float]) -> Callable[[dict, GPUSpec], tuple[float, float]]:
    def bounds(d: dict, gpu: GPUSpec) -> tuple[float, float]:
        top = max((m["busbw_gbs"] for k, m in d["comm"].items() if k.endswith(":" + link)), default=1.0)
        return 0.1 * rate(gpu) / top, NVLINK_HEADROOM * rate(gpu) / top
    return bounds


def _set_gemm(base: dict, out: dict, v: float) -> None:
    out["gemm"]["peak_tflops"] = _sig(v)


def _set_layer(base: dict, out: dict, v: float) -> None:
    f, b = base["layer_overhead_fwd_s"], base["layer_overhead_bwd_s"]
    out["layer_overhead_fwd_s"] = _sig(v)
    out["layer_overhead_bwd_s"] = _sig(v * (b / f if f > 0 else 1.0))


def _set_mb(base: dict, out: dict, v: float) -> None:
    out["microbatch_overhead_fwd_s"] = out["microbatch_overhead_bwd_s"] = _sig(v)


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("gemm_peak_tflops", True, lambda d: d["gemm"]["peak_tflops"], _set_gemm,
         lambda d, g: (0.2 * g.peak_bf16_tflops, 0.95 * g.peak_bf16_tflops)),
    Knob("attention_scale", True, lambda d: 1.0, _scale_attention,
         lambda d, g: (0.2 * g.peak_bf16_tflops / max(c["peak_tflops"] for c in _peaks(d)),
                       0.95 * g.peak_bf16_tflops / max(c["peak_tflops"] for c in _peaks(d)))),
    Knob("nvlink_scale", True, lambda d: 1.0, _scale_links("nvlink"), _link_bounds("nvlink", lambda g: g.nvlink_gbs)),
    Knob("network_scale", True, lambda d: 1.0, _scale_links("network"),
         _link_bounds("network", lambda g: g.network_gbs)),
    Knob("layer_overhead_s", False, lambda d: d["layer_overhead_fwd_s"], _set_layer, lambda d, g: (0.0, 2e-3),
         step=1e-5),
    Knob("microbatch_overhead_s", False, lambda d: d["microbatch_overhead_fwd_s"], _set_mb,
         lambda d, g: (0.0, 0.05), step=1e-3),
)}


def calibration_with(base: Calibration, values: dict[str, float], name: str | None = None,
                     source: str | None = None) -> Calibration:
    """``base`` with each knob of ``values`` set (scales relative to ``base``)."""
    b = base.to_dict()
    out = copy.deepcopy(b)
    for k, v in values.items():
        KNOBS[k].apply(b, out, float(v))
    if name is not None:
        out["name"] = name
    if source is not None:
        out["source"] = source
    return Calibration.from_dict(out, origin="fitted calibration")


def _times(logs: Sequence[RunLog], cal: Calibration, rows: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Simulated seconds of the iterations ``rows[j]`` of each log j (all when None), concatenated."""
    out = []
    for j, log in enumerate(logs):
        cm = cost_model_of(log, cal)
        idx = range(len(log.iterations)) if rows is None else rows[j]
        out += [predict(log, log.iterations[int(i)], cm)[0] for i in idx]
    return np.asarray(out, dtype=np.float64)


def effect(knob: Knob, v: np.ndarray | float) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return 1.0 / v if knob.inverse else v


def decompose(logs: Sequence[RunLog], base: Calibration, values: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(T [N] simulated seconds at ``values``, A [N, K] their slopes per knob's effect, 1/value or value)."""
    names = list(values)
    t0 = _times(logs, calibration_with(base, values))
    a = np.zeros((len(t0), len(names)))
    for k, n in enumerate(names):
        knob, v = KNOBS[n], values[n]
        v2 = v * 1.1 if knob.inverse else v + max(0.1 * v, knob.step)
        t = _times(logs, calibration_with(base, {**values, n: v2}))
        a[:, k] = (t - t0) / (effect(knob, v2) - effect(knob, v))
    return t0, a


def solve(t0: np.ndarray, a: np.ndarray, measured: np.ndarray, at: dict[str, float], start: dict[str, float],
          bounds: dict[str, tuple[float, float]], prior: float) -> dict[str, float]:
    """Bounded least squares of log(T(x) / measured) on the linearised T around ``at``, pulled towards
    ``start`` with weight ``prior``."""
    from scipy.optimize import least_squares

    names = list(at)
    knobs = [KNOBS[n] for n in names]
    e_at = np.array([effect(k, at[n]) for k, n in zip(knobs, names)])
    lo = np.array([bounds[n][0] for n in names])
    hi = np.array([bounds[n][1] for n in names])
    widths = hi - lo
    x0 = np.clip([at[n] for n in names], lo, hi)

    def resid(x: np.ndarray) -> np.ndarray:
        e = np.array([effect(k, xi) for k, xi in zip(knobs, x)])
        t = np.maximum(t0 + a @ (e - e_at), 1e-9)
        pull = [np.log(xi / start[n]) if k.inverse else (xi - start[n]) / w
                for k, n, xi, w in zip(knobs, names, x, widths)]
        return np.concatenate([np.log(t / measured), prior * np.asarray(pull)])

    r = least_squares(resid, x0, bounds=(lo, hi), x_scale=np.maximum(np.abs(x0), widths * 1e-3), method="trf")
    return {n: float(v) for n, v in zip(names, r.x)}


@dataclass(frozen=True)
class FitResult:
    calibration: Calibration
    values: dict[str, float]
    start: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    in_sample: dict[str, ErrorStats]  # per dataset, and "all"
    cv: dict[str, ErrorStats]  # held-out, per dataset and "all"
    folds: int
    datasets: dict[str, int] = field(default_factory=dict)


def _by_dataset(logs: Sequence[RunLog], pred: np.ndarray, meas: np.ndarray) -> dict[str, ErrorStats]:
    out, i = {}, 0
    for log in logs:
        n = len(log.iterations)
        out[log.dataset] = error_stats(pred[i:i + n], meas[i:i + n])
        i += n
    out["all"] = error_stats(pred, meas)
    return out


def fit_runs(logs: Sequence[RunLog], base: Calibration, gpu: GPUSpec, *, knobs: Sequence[str] = tuple(KNOBS),
             folds: int = 5, rounds: int = 2, prior: float = 0.05, name: str = "fitted",
             progress: Callable[[str], None] | None = None) -> FitResult:
    """Fit ``knobs`` of ``base`` to every iteration of ``logs`` (all on ``gpu``); k-fold CV with ``folds``."""
    if not logs:
        raise LogError("calibrate --runs: no run logs given")
    bad = [k for k in knobs if k not in KNOBS]
    if bad:
        raise LogError(f"knob {bad[0]!r} is unknown; valid: {', '.join(KNOBS)}")
    say = progress or (lambda _s: None)
    d = base.to_dict()
    start = {k: KNOBS[k].start(d) for k in knobs}
    bounds = {k: KNOBS[k].bounds(d, gpu) for k in knobs}
    meas = np.concatenate([[it.measured_s for it in log.iterations] for log in logs])
    x = dict(start)
    for r in range(rounds):
        say(f"round {r + 1}/{rounds}: {(len(knobs) + 1) * len(meas)} simulations")
        t0, a = decompose(logs, base, x)
        x_at = x
        x = solve(t0, a, meas, x_at, start, bounds, prior)
    # cross-validation on the last linearisation: refit on k − 1 folds of every dataset, predict the rest
    sizes = [len(log.iterations) for log in logs]
    offsets = np.cumsum([0] + sizes[:-1])
    fold_sets = [kfold_indices(n, folds) for n in sizes]
    k_eff = max(len(f) for f in fold_sets)
    held = np.zeros(len(meas))
    for f in range(k_eff):
        test = [fs[f] if f < len(fs) else np.array([], dtype=int) for fs in fold_sets]
        test_rows = np.concatenate([o + t for o, t in zip(offsets, test)]).astype(int)
        train = np.setdiff1d(np.arange(len(meas)), test_rows)
        if len(train) == 0 or len(test_rows) == 0:
            continue
        say(f"fold {f + 1}/{k_eff}: refit on {len(train)} iterations, simulate {len(test_rows)}")
        xf = solve(t0[train], a[train], meas[train], x_at, start, bounds, prior)
        held[test_rows] = _times(logs, calibration_with(base, xf), test)
    # the values reported are the values applied: 4 significant digits, kept inside the bounds
    x = {k: min(max(float(f"{v:.4g}"), bounds[k][0]), bounds[k][1]) for k, v in x.items()}
    say(f"final: {len(meas)} simulations")
    desc = ", ".join(f"{k} {v:.4g}" for k, v in x.items())
    names = "; ".join(f"{log.dataset} ({len(log.iterations)})" for log in logs)
    cal = calibration_with(base, x, name=name,
                           source=f"{base.source} | end-to-end fit (dcpsim calibrate --runs) to {len(meas)} measured "
                                  f"steps: {names}; {desc}")
    pred = _times(logs, cal)
    return FitResult(cal, x, start, bounds, _by_dataset(logs, pred, meas), _by_dataset(logs, held, meas), k_eff,
                     {log.dataset: len(log.iterations) for log in logs})


def fit_report(res: FitResult) -> str:
    from dcpsim.experiments.output.tables import format_table

    rows = [[k, f"{res.start[k]:.4g}", f"{v:.4g}", f"[{res.bounds[k][0]:.3g}, {res.bounds[k][1]:.3g}]"]
            for k, v in res.values.items()]
    text = format_table(rows, ["knob", "start", "fitted", "bounds"])
    pct = lambda v: f"{v:.1%}"
    rows2 = [[ds, str(s.n), pct(s.mape), pct(res.cv[ds].mape), f"{s.mean_error:+.1%}", f"{s.corr:.3f}"]
             for ds, s in res.in_sample.items()]
    text += "\n" + format_table(rows2, ["dataset", "n", "in-sample MAPE", f"{res.folds}-fold CV MAPE",
                                        "mean error", "corr"])
    return text
