"""Attention backends: one set of kernel curves per implementation (FlashAttention-2, FlashAttention-3, cuDNN).

FA2, FA3 and cuDNN differ by up to 2x on the same GPU (reference tables in cost_models/data/reference), so the
model prices the backend a job names (``JobSpec.attention_backend``, ``--attention-backend``, scenario field
``attention_backend``), each with its own forward and backward curve, causal and not (the saturating curve of
cost_models.calibration, x = block length).

Default: what Megatron-Core with TransformerEngine runs. TE's ``get_attention_backend``
(transformer_engine/pytorch/attention/dot_product_attention/utils.py) disables FlashAttention "to give
FusedAttention preference on Hopper+ for performance reasons" whenever cuDNN's F16_arbitrary_seqlen fused
attention supports the shape (BF16, causal or padding masks, THD packing), so on H100/H200 the default is
``cudnn``; on Ampere (A100) FlashAttention-2 wins that selection (``fa2``).

Curves come from profile rows (``kernel`` column; names map to backends by prefix: ``fa2``, ``fa3``,
``cudnn*``) through :func:`fit_backends`: every (pass, mask) the profile measures is fitted; a missing one is
derived from the most completely measured backend's ratio at the same lengths (missing causal backward:
own full backward × own causal/full forward ratio, as cost_models.fitting does for FA3; missing full
forward: own causal forward × reference full/causal forward; missing backward: own forward × reference
backward/forward). :attr:`AttentionCurves.derived` lists which.

Packed documents (THD): one kernel call covers every document of a group's step (TE passes cu_seqlens), so
each document is priced at the efficiency of its own block length and the call's fixed cost (launch) is
paid once per call (cost_models.fixed_costs: once per layer and ring step), never per document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from dcpsim.cost_models.calibration import SaturatingCurve
from dcpsim.cost_models.errors import SpecError

BACKENDS = ("fa2", "fa3", "cudnn")
KEYS = ("fwd_causal", "bwd_causal", "fwd_full", "bwd_full")
DEFAULT_BACKEND = {"a100": "fa2"}  # every other shipped GPU is Hopper or newer: cudnn (module docstring)


def default_backend(gpu_name: str) -> str:
    return DEFAULT_BACKEND.get(gpu_name, "cudnn")


def backend_of_kernel(kernel: str) -> str | None:
    """The backend a profile's kernel name belongs to (``cudnn9.1`` → cudnn), None if none."""
    k = str(kernel).lower()
    for b in BACKENDS:
        if k.startswith(b):
            return b
    return None


def check_backend(name: str | None, origin: str = "attention_backend") -> None:
    if name is not None and name not in BACKENDS:
        raise SpecError(f"{origin} = {name!r} is invalid: expected one of {', '.join(BACKENDS)}")


@dataclass(frozen=True)
class AttentionCurves:
    """One backend's four curves, the kernel they were fitted to, and which were derived (module docstring)."""

    kernel: str
    fwd_causal: SaturatingCurve
    bwd_causal: SaturatingCurve
    fwd_full: SaturatingCurve
    bwd_full: SaturatingCurve
    derived: tuple[str, ...] = field(default_factory=tuple)

    def curve(self, key: str) -> SaturatingCurve:
        return getattr(self, key)

    def to_dict(self) -> dict:
        d = {k: {"peak_tflops": self.curve(k).peak_tflops, "half": self.curve(k).half} for k in KEYS}
        return d | {"kernel": self.kernel, "derived": list(self.derived)}

    @staticmethod
    def from_dict(d: Mapping) -> AttentionCurves:
        return AttentionCurves(kernel=str(d["kernel"]), derived=tuple(d.get("derived", ())),
                               **{k: SaturatingCurve(**d[k]) for k in KEYS})


def _ratio_fit(x: np.ndarray, num: SaturatingCurve, a: SaturatingCurve, b: SaturatingCurve) -> SaturatingCurve:
    """The curve through num(x) · a(x) / b(x) (TFLOP/s) at the sizes x."""
    from dcpsim.cost_models.fitting import fit_saturating

    tf = num.tflops(x) * a.tflops(x) / b.tflops(x)
    return fit_saturating(x, tf * 1e12, np.ones_like(x))


def fit_backends(curves: Mapping[tuple[str, str, int], SaturatingCurve],
                 sizes: Mapping[tuple[str, str, int], np.ndarray],
                 fwd_bwd: Mapping[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
                 ) -> dict[str, AttentionCurves]:
    """Backends from fitted groups ``curves[(kernel, op, causal)]`` (one head dimension) and the sizes each
    group was measured at. Per backend the kernel with the most measured (pass, mask) keys wins.
    ``fwd_bwd[(kernel, causal)]`` = (sizes, forward FLOPs, seconds) of ``attn_fwd_bwd`` rows: a missing
    backward of that mask is fitted to their time minus the forward curve's."""
    from dcpsim.cost_models.fitting import fit_saturating
    from dcpsim.cost_models.flops import ATTENTION_BWD_FACTOR

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
        if not set(KEYS) <= set(have):
            continue
        out[b] = AttentionCurves(kernel, derived=tuple(derived), **{k: have[k] for k in KEYS})
    return out
