"""Calibration: the fitted curves the analytic cost model reads at simulation time (O(1) look-ups).

* Kernel throughput against size follows a saturating curve, TFLOP/s(x) = peak · x / (x + half): for
  attention, x is the block length in tokens (it fits published FlashAttention-3 H100 figures: causal forward
  peak ≈ 649, half ≈ 567 tokens); for GEMMs, x is the tokens of the GEMM.
* Collectives follow an α–β model per (operation, link class): t = base + (n−1)·hop + bytes·factor / busbw,
  where ``bytes`` is the nccl-tests buffer size, factor = (n−1)/n for all-gather, reduce-scatter and
  all-to-all, 2(n−1)/n for all-reduce, 1 for a point-to-point send/recv (NCCL's bus-bandwidth convention).
  Base and per-hop latencies follow NCCL's tuning model (src/graph/tuning.cc: about 8.4 µs base, 3.4 µs per
  NVLink hop, 14 µs per network hop).
* A fixed cost per decoder layer and microbatch on one rank, ``layer_overhead_fwd_s`` / ``layer_overhead_bwd_s``
  (seconds), on top of the kernel curves: what one layer costs beyond its attention kernel and its GEMMs —
  kernel launches and framework (autograd, Python) dispatch, RMSNorm, RoPE, the SwiGLU activation, residual
  adds, reshapes and copies. It is independent of the token count to first order, so it is what makes many
  small microbatches cost more than few large ones. Fitted from ``layer_fwd`` / ``layer_bwd`` profile rows
  (:mod:`cost_models.fitting`); without them, the published kernel-count default of cost_models.fixed_costs.
* Fixed costs per ring step beyond the first (``ring_step_overhead_{fwd,bwd}_s``) and per microbatch per
  stage (``microbatch_overhead_{fwd,bwd}_s``), seconds; defaults and sources in cost_models.fixed_costs.

Defaults come from the shipped calibration JSON of the GPU when present (``cost_models/data``), else from the
published figures above; ``dcpsim calibrate`` produces the same JSON from profile tables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.fixed_costs import FIELDS as FIXED_FIELDS
from dcpsim.cost_models.fixed_costs import PUBLISHED as FIXED_PUBLISHED
from dcpsim.cost_models.fixed_costs import SOURCE as FIXED_SOURCE
from dcpsim.cost_models.specs import GPUSpec
from dcpsim.userfile import check_number, load_json

LINKS = ("nvlink", "network")
COLLECTIVES = ("send_recv", "all_to_all", "all_gather", "reduce_scatter", "all_reduce")
_FACTOR = {"send_recv": None, "all_to_all": 1.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0}
DATA_DIR = Path(__file__).parent / "data"
ATTENTION_KEYS = ("fwd_causal", "bwd_causal", "fwd_full", "bwd_full")  # AttentionCurves' four curves


@dataclass(frozen=True)
class SaturatingCurve:
    """TFLOP/s(x) = peak_tflops · x / (x + half): ``half`` is the size (tokens) reaching half of the peak."""

    peak_tflops: float
    half: float

    def tflops(self, x: np.ndarray | float) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.peak_tflops * x / (x + self.half)

    def seconds(self, flops: np.ndarray | float, x: np.ndarray | float) -> np.ndarray:
        """Time of ``flops`` at size ``x``; zero where there is no work."""
        x = np.maximum(np.asarray(x, dtype=np.float64), 1e-9)
        return self.seconds_clamped(np.asarray(flops, dtype=np.float64), x)

    def seconds_clamped(self, flops: np.ndarray, x: np.ndarray) -> np.ndarray:
        """:meth:`seconds` for float64 ``flops`` and a size ``x`` already clamped to ≥ 1e-9 (float64): callers
        pricing several curves at one size clamp it once."""
        return flops * (x + self.half) / (self.peak_tflops * 1e12 * x)


@dataclass(frozen=True)
class LinkModel:
    """α–β model of one collective on one link class (seconds, GB/s)."""

    base_s: float
    hop_s: float
    busbw_gbs: float

    def seconds(self, op: str, nbytes: np.ndarray | float, n: np.ndarray | int) -> np.ndarray:
        """Time of collective ``op`` over ``n`` ranks with an nccl-tests buffer of ``nbytes``; 0 when n ≤ 1."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        if np.ndim(n) == 0:  # one group size: the same arithmetic on floats (a send/recv's factor 1 is exact)
            nf = float(n)
            if op == "send_recv":
                factor, hops = 1.0, 1.0
            else:
                factor, hops = cast(float, _FACTOR[op]) * (nf - 1) / max(nf, 1.0), nf - 1
            if not nf > 1:
                return np.zeros(nbytes.shape)
            return np.asarray(self.transfer_s(self.latency_s(hops), nbytes if factor == 1.0 else nbytes * factor))
        n = np.asarray(n, dtype=np.float64)
        factors, hops_n = collective_terms(op, n)
        return np.where(n > 1, self.transfer_s(self.latency_s(hops_n), nbytes * factors), 0.0)

    def send_recv_s(self, nbytes: np.ndarray) -> np.ndarray:
        """``seconds("send_recv", nbytes, 2)``: one hop, the whole buffer."""
        return self.transfer_s(self.latency_s(1.0), np.asarray(nbytes, dtype=np.float64))

    def latency_s(self, hops: np.ndarray | float) -> np.ndarray | float:
        """The α part: base + hops · per-hop latency (seconds)."""
        return self.base_s + hops * self.hop_s

    def transfer_s(self, latency: np.ndarray | float, scaled_bytes: np.ndarray) -> np.ndarray:
        """latency + the β part, ``scaled_bytes`` (buffer bytes × the collective's factor) / bus bandwidth; no
        n ≤ 1 mask (the caller's)."""
        return latency + scaled_bytes / (self.busbw_gbs * 1e9)


def collective_terms(op: str, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bus-bandwidth factor, latency hops) of collective ``op`` over ``n`` ranks (float64 array): 1 and 1 for a
    send/recv; factor (n−1)/n (2(n−1)/n for all-reduce) and n − 1 hops for the ring collectives."""
    if op == "send_recv":
        return np.ones_like(n), np.ones_like(n)
    hops = n - 1
    return _FACTOR[op] * hops / np.maximum(n, 1), hops


@dataclass(frozen=True)
class AttentionCurves:
    """One backend's four curves, the kernel they were fitted to, and which were derived
    (cost_models.fitting.fit_backends)."""

    kernel: str
    fwd_causal: SaturatingCurve
    bwd_causal: SaturatingCurve
    fwd_full: SaturatingCurve
    bwd_full: SaturatingCurve
    derived: tuple[str, ...] = field(default_factory=tuple)

    def curve(self, key: str) -> SaturatingCurve:
        return getattr(self, key)

    def to_dict(self) -> dict:
        d = {k: {"peak_tflops": self.curve(k).peak_tflops, "half": self.curve(k).half} for k in ATTENTION_KEYS}
        return d | {"kernel": self.kernel, "derived": list(self.derived)}


@dataclass(frozen=True)
class Calibration:
    """Everything measured about one GPU kind that the analytic model needs."""

    name: str
    attn_fwd: SaturatingCurve  # causal forward, x = block length (tokens)
    attn_bwd: SaturatingCurve  # causal backward, x = block length (tokens)
    gemm: SaturatingCurve  # x = tokens of the GEMM
    comm: Mapping[str, LinkModel] = field(default_factory=dict)  # key "op:link"
    source: str = ""
    layer_overhead_fwd_s: float = FIXED_PUBLISHED["layer_overhead_fwd_s"]  # s per layer per microbatch, fwd
    layer_overhead_bwd_s: float = FIXED_PUBLISHED["layer_overhead_bwd_s"]  # the same, backward
    ring_step_overhead_fwd_s: float = FIXED_PUBLISHED["ring_step_overhead_fwd_s"]  # s per layer per ring step
    ring_step_overhead_bwd_s: float = FIXED_PUBLISHED["ring_step_overhead_bwd_s"]
    microbatch_overhead_fwd_s: float = FIXED_PUBLISHED["microbatch_overhead_fwd_s"]  # s per microbatch per stage
    microbatch_overhead_bwd_s: float = FIXED_PUBLISHED["microbatch_overhead_bwd_s"]
    # per attention backend (fa2, fa3, cudnn): AttentionCurves; empty = none
    attention: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in FIXED_FIELDS:
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise CalibrationError(f"calibration {self.name!r}: {f} = {v!r} is invalid: expected a "
                                       "finite number of seconds ≥ 0")

    def without_fixed_costs(self) -> Calibration:
        """The same kernels and links with every fixed cost (per layer, ring step, microbatch) at 0."""
        return replace(self, layer_overhead_fwd_s=0.0, layer_overhead_bwd_s=0.0, ring_step_overhead_fwd_s=0.0,
                       ring_step_overhead_bwd_s=0.0, microbatch_overhead_fwd_s=0.0, microbatch_overhead_bwd_s=0.0)

    def link(self, op: str, link: str) -> LinkModel:
        if op not in COLLECTIVES or link not in LINKS:
            raise CalibrationError(f"no collective {op!r} on link {link!r}; valid ops: {', '.join(COLLECTIVES)}; "
                                   f"links: {', '.join(LINKS)}")
        for key in (f"{op}:{link}", f"send_recv:{link}"):
            if key in self.comm:
                return self.comm[key]
        raise CalibrationError(f"calibration {self.name!r} has no model for {op} on {link}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["comm"] = {k: asdict(v) for k, v in self.comm.items()}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @staticmethod
    def from_dict(d: Any, origin: str = "calibration") -> Calibration:
        """The calibration a JSON document describes; every key, type and value is checked (one
        CalibrationError line naming the origin, the key, the value and what is valid)."""
        top = _table(d, origin, "", ("name", "attn_fwd", "attn_bwd", "gemm"),
                     ("comm", "source", "attention", *FIXED_FIELDS))
        comm = _table(top.get("comm", {}), origin, "comm", (), tuple(f"{op}:{ln}" for op in COLLECTIVES
                                                                      for ln in LINKS))
        return Calibration(
            name=_string(top["name"], f"{origin}: name"),
            attn_fwd=_curve(top["attn_fwd"], origin, "attn_fwd"),
            attn_bwd=_curve(top["attn_bwd"], origin, "attn_bwd"),
            gemm=_curve(top["gemm"], origin, "gemm"),
            comm={k: _link(v, origin, f"comm.{k}") for k, v in comm.items()},
            source=_string(top.get("source", ""), f"{origin}: source"),
            **{f: float(check_number(top.get(f, FIXED_PUBLISHED[f]), f"{origin}: {f}", ge=0.0,
                                     error=CalibrationError)) for f in FIXED_FIELDS},
            attention=_attention_from_dict(top.get("attention", {}), origin),
        )

    @staticmethod
    def load(path: str | Path) -> Calibration:
        p = Path(path)
        return Calibration.from_dict(load_json(p, "calibration file (JSON)", error=CalibrationError),
                                     origin=str(p))


def _table(d: Any, origin: str, key: str, required: tuple[str, ...], optional: tuple[str, ...]) -> Mapping:
    """``d`` if it is a JSON object holding every ``required`` key and no key outside ``required`` and
    ``optional`` (an empty ``optional`` and ``required`` allow any key)."""
    valid = (*required, *optional)
    if not isinstance(d, Mapping):
        raise CalibrationError(f"{origin}: {key or 'the document'} = {_short(d)} is invalid: expected a JSON "
                               f"object{' with keys ' + ', '.join(valid) if valid else ''}")
    where = f"{key}." if key else ""
    unknown = sorted(str(k) for k in d if k not in valid)
    if unknown and valid:
        raise CalibrationError(f"{origin}: unknown key {where}{unknown[0]} (check its spelling); valid keys"
                               f"{' in ' + key if key else ''}: {', '.join(valid)}")
    missing = [k for k in required if k not in d]
    if missing:
        raise CalibrationError(f"{origin}: key {where}{missing[0]} is missing; required"
                               f"{' in ' + key if key else ''}: {', '.join(required)}")
    return d


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _string(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise CalibrationError(f"{where} = {_short(v)} is invalid: expected a string")
    return v


def _curve(d: Any, origin: str, key: str) -> SaturatingCurve:
    t = _table(d, origin, key, ("peak_tflops", "half"), ())
    return SaturatingCurve(
        peak_tflops=float(check_number(t["peak_tflops"], f"{origin}: {key}.peak_tflops", gt=0.0,
                                       error=CalibrationError)),
        half=float(check_number(t["half"], f"{origin}: {key}.half", ge=0.0, error=CalibrationError)))


def _link(d: Any, origin: str, key: str) -> LinkModel:
    t = _table(d, origin, key, ("base_s", "hop_s", "busbw_gbs"), ())
    def seconds(k: str) -> float:
        return float(check_number(t[k], f"{origin}: {key}.{k}", ge=0.0, error=CalibrationError))

    return LinkModel(base_s=seconds("base_s"), hop_s=seconds("hop_s"),
                     busbw_gbs=float(check_number(t["busbw_gbs"], f"{origin}: {key}.busbw_gbs", gt=0.0,
                                                  error=CalibrationError)))


def _attention_from_dict(d: Any, origin: str = "calibration") -> dict:
    backends = _table(d, origin, "attention", (), ())
    out = {}
    for name in sorted(backends, key=str):
        key = f"attention.{name}"
        t = _table(backends[name], origin, key, ("kernel", *ATTENTION_KEYS), ("derived",))
        derived = t.get("derived", [])
        if not isinstance(derived, (list, tuple)) or not all(isinstance(x, str) for x in derived):
            raise CalibrationError(f"{origin}: {key}.derived = {_short(derived)} is invalid: expected a list of "
                                   "strings (which curves were derived, and how)")
        out[str(name)] = AttentionCurves(kernel=_string(t["kernel"], f"{origin}: {key}.kernel"),
                                         derived=tuple(derived),
                                         **{k: _curve(t[k], origin, f"{key}.{k}") for k in ATTENTION_KEYS})
    return out


H100_PEAK_BF16_TFLOPS = 989.0  # H100 SXM dense BF16, NVIDIA data sheet (the h100 preset's peak)


def published_calibration(gpu: GPUSpec) -> Calibration:
    """Calibration from published figures alone (docs/cost_model.md; sources in the module docstring)."""
    nv = LinkModel(base_s=8.4e-6, hop_s=3.4e-6, busbw_gbs=gpu.nvlink_gbs)
    net = LinkModel(base_s=8.4e-6, hop_s=14e-6, busbw_gbs=gpu.network_gbs)
    comm = {f"{op}:nvlink": nv for op in COLLECTIVES} | {f"{op}:network": net for op in COLLECTIVES}
    scale = gpu.peak_bf16_tflops / H100_PEAK_BF16_TFLOPS
    return Calibration(
        name=f"{gpu.name}-published",
        attn_fwd=SaturatingCurve(649.0 * scale, 567.0),
        attn_bwd=SaturatingCurve(561.0 * scale, 700.0),
        # GEMM half-saturation: the roofline knee of a [T x h]·[h x f] bf16 GEMM, whose arithmetic intensity is
        # about T FLOP/byte for T << h, f (the weights dominate the bytes), reaches the achievable peak at
        # T = 0.8·peak / HBM bandwidth: 236 tokens on H100 (0.8·989 TFLOP/s / 3.35 TB/s), 165 on H200
        # (/ 4.8 TB/s), data sheets. 192 lies between the two; it is not a measurement: a GEMM profile
        # (real_runtime's profiler, `dcpsim calibrate`) replaces it.
        gemm=SaturatingCurve(0.8 * gpu.peak_bf16_tflops, 192.0),
        comm=comm,
        source="FlashAttention-3 paper (Shah et al. 2024) H100 figures; GEMMs at 80% of peak (Llama 3 paper); "
               "NCCL latency model and nccl-tests bus bandwidths; " + FIXED_SOURCE,
    )


def transferred_calibration(gpu: GPUSpec) -> Calibration:
    """For a GPU without a shipped calibration: the published figures (:func:`published_calibration`) with
    the GEMM rate at the fraction of the data-sheet BF16 peak that the shipped H100 calibration reaches. That
    rate is fitted end to end to measured NeMo steps on H100 (cost_models/data/build_defaults.py, step 7), so
    it carries what the model does not price beside the GEMMs at those layouts; that the same fraction holds
    on another GPU (the same Megatron-Core and TransformerEngine stack) is an assumption, which a measured
    profile (``dcpsim calibrate``) replaces."""
    pub = published_calibration(gpu)
    fraction = Calibration.load(DATA_DIR / "calibration_h100.json").gemm.peak_tflops / H100_PEAK_BF16_TFLOPS
    return replace(pub, gemm=SaturatingCurve(fraction * gpu.peak_bf16_tflops, pub.gemm.half),
                   source=pub.source.replace("GEMMs at 80% of peak (Llama 3 paper)",
                                             f"GEMMs at {fraction:.1%} of peak (the H100 default's fitted rate)"))


def default_calibration(gpu: GPUSpec) -> Calibration:
    """The shipped calibration of ``gpu`` (``cost_models/data/calibration_<gpu>.json``) or, failing that, the
    published figures with the H100 default's GEMM efficiency (:func:`transferred_calibration`)."""
    path = DATA_DIR / f"calibration_{gpu.name}.json"
    if path.exists():
        return Calibration.load(path)
    return transferred_calibration(gpu)
