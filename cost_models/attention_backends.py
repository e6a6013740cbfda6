"""Attention backends by name: one set of kernel curves per implementation (FlashAttention-2, FlashAttention-3,
cuDNN), and the default choice.

FA2, FA3 and cuDNN differ by up to 2x on the same GPU (reference tables in cost_models/data/reference), so the
model prices the backend a job names (``JobSpec.attention_backend``, ``--attention-backend``, scenario field
``attention_backend``), each with its own forward and backward curve, causal and not (the saturating curve of
cost_models.calibration, x = block length).

Default: what Megatron-Core with TransformerEngine runs. TE's ``get_attention_backend``
(transformer_engine/pytorch/attention/dot_product_attention/utils.py) disables FlashAttention "to give
FusedAttention preference on Hopper+ for performance reasons" whenever cuDNN's F16_arbitrary_seqlen fused
attention supports the shape (BF16, causal or padding masks, THD packing), so on H100/H200 the default is
``cudnn``; on Ampere (A100) FlashAttention-2 wins that selection (``fa2``).

The names live here, with nothing else of the package below them (errors only), so that ``JobSpec`` can check
a job's backend: each backend's curves are :class:`cost_models.calibration.AttentionCurves`, fitted from
profile rows by :func:`cost_models.fitting.fit_backends` (``kernel`` column; names map to backends by prefix:
``fa2``, ``fa3``, ``cudnn*``, :func:`backend_of_kernel`).

Packed documents (THD): one kernel call covers every document of a group's step (TE passes cu_seqlens), so
each document is priced at the efficiency of its own block length and the call's fixed cost (launch) is
paid once per call (cost_models.fixed_costs: once per layer and ring step), never per document.
"""

from __future__ import annotations

from dcpsim.cost_models.errors import SpecError

BACKENDS = ("fa2", "fa3", "cudnn")
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


def check_attention_backend(name: str | None, origin: str = "attention_backend") -> None:
    """SpecError naming ``origin`` unless ``name`` is None or one of :data:`BACKENDS`."""
    if name is not None and name not in BACKENDS:
        raise SpecError(f"{origin} = {name!r} is invalid: expected one of {', '.join(BACKENDS)}")
