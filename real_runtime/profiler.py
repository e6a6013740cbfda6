"""Profilers: time attention, GEMMs and collectives on this hardware and return profile-table rows.

The rows follow the profile-table schema of :mod:`cost_models.profile_table` (one row per measured call:
``op``, shape fields, ``device``, ``seconds``, ``source``), which ``dcpsim calibrate`` and
:func:`cost_models.fitting.fit_calibration` turn into a calibration. What is measured:

* **attention** (``attn_fwd``, ``attn_bwd``): ``varlen_attention`` over one causal document of each length,
  with the model's query heads, KV heads and head dimension, forward alone and backward alone (the forward
  that feeds each backward is not timed); ``kernel`` is the backend that ran (``math`` on CPUs, ``flash``
  with flash-attn on GPUs) — the same one the runner uses;
* **GEMMs** (``gemm``): ``x @ Wᵀ`` of every distinct linear shape of one layer of the model (QKV and O
  projections, SwiGLU up/gate and down), forward, for several token counts;
* **decoder layers** (``layer_fwd``, ``layer_bwd``): one :class:`real_runtime.model.Block` of the model
  (RMSNorm, QKV/O projections, RoPE, ``varlen_attention`` with the same kernel as above, SwiGLU MLP,
  residuals) over one causal document of each token count, forward alone (building the autograd graph, as
  in training) and backward alone (parameter gradients accumulate, as over a step's microbatches). Weights
  are float32 and bfloat16 runs under autocast, as in the runner; RoPE's cos/sin are made once per forward
  of the whole model, so they are computed outside the timed layer. The fitter subtracts the analytic
  model's kernel time of the same layer and keeps the rest as the fixed per-layer overhead;
* **collectives** (with more than one process): in :mod:`real_runtime.profiler_comm`.

Compute times are read with a device-synchronising clock after ``warmup`` untimed calls, as the settings'
``window_s`` says: the mean of calls over a window of at least ``window_s`` timed seconds, or (``window_s``
= 0) the median of ``repeats`` calls; with several processes they run concurrently or on rank 0 alone
(``layout``; :mod:`real_runtime.profile_timing` explains both choices). A collective's time is the median of
``repeats`` calls, each after a barrier of its group, and rank 0 reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from dcpsim.cost_models.specs import ModelSpec
from dcpsim.real_runtime.attention import resolve_backend, varlen_attention
from dcpsim.real_runtime.model import Block, rope_cos_sin
from dcpsim.real_runtime.profile_timing import LAYOUTS, Timer
from dcpsim.real_runtime.timing import Clock


@dataclass(frozen=True)
class ProfileSettings:
    """What to measure and how often."""

    attention_lengths: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
    gemm_tokens: tuple[int, ...] = (64, 256, 1024, 4096)
    layer_tokens: tuple[int, ...] = (32, 128, 512, 2048)
    collective_bytes: tuple[int, ...] = (1 << 14, 1 << 17, 1 << 20, 1 << 22)
    repeats: int = 7
    warmup: int = 1
    window_s: float = 0.2
    """compute: mean of calls over at least this many timed seconds per measurement; 0 = median of repeats"""
    layout: str = "concurrent"
    """compute with several processes: ``concurrent`` (all time the same ops at once) or ``alone`` (rank 0)"""

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"profile layout {self.layout!r} is unknown; valid: {', '.join(LAYOUTS)}")
        if self.window_s < 0 or self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"window_s ({self.window_s}) ≥ 0, repeats ({self.repeats}) ≥ 1 and warmup "
                             f"({self.warmup}) ≥ 0 required")

    @staticmethod
    def quick() -> ProfileSettings:
        """A short profile (a few seconds on a CPU): fewer sizes and repeats, shorter windows."""
        return ProfileSettings(attention_lengths=(64, 256, 1024), gemm_tokens=(64, 512, 2048),
                               layer_tokens=(32, 128, 512), collective_bytes=(1 << 14, 1 << 18, 1 << 21), repeats=3,
                               warmup=1, window_s=0.1)

    def timer(self, device: torch.device, sync: Callable[[], Any] | None = None) -> Timer:
        """The :class:`~real_runtime.profile_timing.Timer` of compute measurements on ``device``."""
        return Timer(Clock(device), self.repeats, self.warmup, self.window_s, sync)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ProfileSettings:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return ProfileSettings(**fields)


def device_name(device: torch.device) -> str:
    """The schema's ``device``: ``h100``/``h200``/... for known GPUs, the lower-cased GPU name otherwise,
    ``cpu`` on CPUs."""
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    for known in ("h200", "h100", "a100", "b200", "gb200", "l40s"):
        if known in name:
            return known
    return name.replace(" ", "-")


def _base_row(op: str, device: str, source: str) -> dict[str, Any]:
    return {"op": op, "kernel": "", "q_len": None, "kv_len": None, "batch": None, "heads": None,
            "kv_heads": None, "head_dim": None, "causal": None, "tokens": None, "in_features": None,
            "out_features": None, "bytes": None, "group_size": None, "link": "", "device": device,
            "seconds": None, "source": source}


def profile_row(op: str, device: str, source: str, **fields: Any) -> dict[str, Any]:
    """A profile-table row of ``op``: every column, ``fields`` set, the others empty."""
    return _base_row(op, device, source) | fields


def _time_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, kernel: Any,
                    timer: Timer) -> tuple[float, float]:
    """Forward and backward seconds of causal ``varlen_attention`` over one document."""
    cu = (0, q.shape[0])
    fwd = timer.seconds(lambda: varlen_attention(q, k, v, cu, backend=kernel))

    def forward_for_backward() -> torch.Tensor:
        qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
        return varlen_attention(qs, ks, vs, cu, backend=kernel)

    bwd = timer.seconds(lambda out: out.backward(dout), setup=forward_for_backward)
    return fwd, bwd


def profile_attention(spec: ModelSpec, lengths: Sequence[int], device: torch.device, dtype: torch.dtype,
                      settings: ProfileSettings, backend: str = "auto", source: str = "",
                      sync: Callable[[], Any] | None = None) -> list[dict[str, Any]]:
    """Causal forward and backward of one document of every length in ``lengths`` (``sync``: called before
    every measurement, a barrier of the processes profiling concurrently)."""
    timer, dev = settings.timer(device, sync), device_name(device)
    rows = []
    for n in lengths:
        gen = torch.Generator(device="cpu").manual_seed(n)
        q = torch.randn(n, spec.heads, spec.head_dim, generator=gen).to(device, dtype)
        k = torch.randn(n, spec.kv_heads, spec.head_dim, generator=gen).to(device, dtype)
        v = torch.randn(n, spec.kv_heads, spec.head_dim, generator=gen).to(device, dtype)
        dout = torch.randn(n, spec.heads, spec.head_dim, generator=gen).to(device, dtype)
        kernel = resolve_backend(backend, q)
        fwd, bwd = _time_attention(q, k, v, dout, kernel, timer)
        for op, sec in (("attn_fwd", fwd), ("attn_bwd", bwd)):
            rows.append(_base_row(op, dev, source) | {
                "kernel": kernel.name, "q_len": n, "kv_len": n, "batch": 1, "heads": spec.heads,
                "kv_heads": spec.kv_heads, "head_dim": spec.head_dim, "causal": 1, "seconds": sec})
    return rows


def linear_shapes(spec: ModelSpec) -> list[tuple[int, int]]:
    """Distinct (in_features, out_features) of one layer's linear maps: Q, K/V, O, SwiGLU up/gate, down."""
    h, qd, kvd = spec.hidden, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    shapes = [(h, qd), (h, kvd), (qd, h), (h, spec.ffn), (spec.ffn, h)]
    return list(dict.fromkeys(shapes))


def profile_gemms(spec: ModelSpec, tokens: Sequence[int], device: torch.device, dtype: torch.dtype,
                  settings: ProfileSettings, source: str = "",
                  sync: Callable[[], Any] | None = None) -> list[dict[str, Any]]:
    """Forward GEMMs of the layer's linear shapes at every token count."""
    timer, dev = settings.timer(device, sync), device_name(device)
    rows = []
    for fin, fout in linear_shapes(spec):
        w = torch.randn(fout, fin, device=device, dtype=dtype) * 0.02
        for m in tokens:
            x = torch.randn(m, fin, device=device, dtype=dtype)
            sec = timer.seconds(partial(F.linear, x, w))
            rows.append(_base_row("gemm", dev, source) | {"tokens": m, "in_features": fin, "out_features": fout,
                                                         "seconds": sec})
    return rows


def _layer(spec: ModelSpec, device: torch.device) -> Block:
    """One decoder layer with float32 weights, normal(0, 0.02) matrices and unit norms (seed 0)."""
    block = Block(spec)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return block.to(device=device, dtype=torch.float32)


def _layer_calls(block: Block, n: int, device: torch.device, dtype: torch.dtype,
                 kernel: Any) -> tuple[Callable[..., torch.Tensor], Callable[[torch.Tensor], None]]:
    """The timed calls of one layer over one causal document of ``n`` tokens: a forward (input needing a
    gradient, under autocast for bfloat16) and the backward of its output."""
    att = block.attn
    gen = torch.Generator(device="cpu").manual_seed(n)
    hidden = block.attn_norm.weight.shape[0]
    x = torch.randn(n, hidden, generator=gen).to(device)
    dout = torch.randn(n, hidden, generator=gen).to(device)
    cos, sin = rope_cos_sin(torch.arange(n, device=device), att.head_dim)
    cu = (0, n)

    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return varlen_attention(q, k, v, cu, backend=kernel)

    def forward(_: Any = None) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            return block(x.detach().requires_grad_(), cos, sin, attn)

    def backward(out: torch.Tensor) -> None:
        out.backward(dout.to(out.dtype))

    return forward, backward


def profile_layers(spec: ModelSpec, tokens: Sequence[int], device: torch.device, dtype: torch.dtype,
                   settings: ProfileSettings, backend: str = "auto", source: str = "",
                   sync: Callable[[], Any] | None = None) -> list[dict[str, Any]]:
    """Forward and backward of one decoder layer over one causal document of every count in ``tokens``."""
    timer, dev = settings.timer(device, sync), device_name(device)
    block = _layer(spec, device)
    kernel = resolve_backend(backend, torch.empty(1, 1, spec.head_dim, device=device, dtype=dtype))
    rows = []
    for n in tokens:
        forward, backward = _layer_calls(block, n, device, dtype, kernel)
        fwd = timer.seconds(forward)
        bwd = timer.seconds(backward, setup=forward)
        block.zero_grad(set_to_none=True)
        for op, sec in (("layer_fwd", fwd), ("layer_bwd", bwd)):
            rows.append(_base_row(op, dev, source) | {
                "kernel": kernel.name, "q_len": n, "kv_len": n, "batch": 1, "heads": spec.heads,
                "kv_heads": spec.kv_heads, "head_dim": spec.head_dim, "causal": 1, "tokens": n,
                "in_features": spec.hidden, "out_features": spec.ffn, "seconds": sec})
    return rows


def profile_compute(spec: ModelSpec, device: torch.device, dtype: torch.dtype, settings: ProfileSettings,
                    backend: str = "auto", source: str = "", sync: Callable[[], Any] | None = None
                    ) -> list[dict[str, Any]]:
    """Attention, GEMM and decoder-layer rows on this process (no process group needed). ``sync`` is called
    before every measurement: a barrier when several processes profile concurrently, so that each
    measurement of one process overlaps the same measurement of the others."""
    with torch.no_grad():
        gemms = profile_gemms(spec, settings.gemm_tokens, device, dtype, settings, source, sync)
    return (profile_attention(spec, settings.attention_lengths, device, dtype, settings, backend, source, sync)
            + gemms + profile_layers(spec, settings.layer_tokens, device, dtype, settings, backend, source, sync))


def layer_burst(spec: ModelSpec, tokens: int, device: torch.device, dtype: torch.dtype,
                backend: str = "auto") -> Callable[[], Any]:
    """A compute burst: one decoder layer's forward (no autograd) over one causal document of ``tokens`` tokens,
    the work a CP group's rank does between two of its synchronisations (see :mod:`real_runtime.profiler_comm`)."""
    block = _layer(spec, device)
    kernel = resolve_backend(backend, torch.empty(1, 1, spec.head_dim, device=device, dtype=dtype))
    forward, _ = _layer_calls(block, tokens, device, dtype, kernel)

    def burst() -> None:
        with torch.no_grad():
            forward()
    return burst


def to_frame(rows: list[dict[str, Any]]):
    """Rows as a DataFrame with every profile-table column (pandas imported here, not at module level)."""
    import pandas as pd

    from dcpsim.cost_models.profile_table import COLUMNS

    return pd.DataFrame(rows, columns=list(COLUMNS))


def write_rows(rows: list[dict[str, Any]], path: str) -> None:
    """Validate and write rows with :func:`cost_models.profile_table.write_profile`."""
    from dcpsim.cost_models.profile_table import write_profile

    write_profile(to_frame(rows), path)
