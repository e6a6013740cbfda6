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
* **collectives** (with more than one process): ``send_recv`` (a pair exchanging buffers both ways at once,
  as a ring step does), ``all_to_all``, ``all_gather``, ``reduce_scatter`` and ``all_reduce`` over aligned
  groups ``0..g-1`` of every power-of-two size ``g``, for several buffer sizes; ``bytes`` follows nccl-tests
  (the total buffer: all_gather's output, reduce_scatter's input, the all-to-all's per-rank buffer, the
  send/recv message). ``link`` is ``nvlink`` when the group's processes share a host (the schema's name for
  "inside a node"), else ``network``. An operation the backend lacks is skipped, not faked.

Every time is the median of ``repeats`` calls after ``warmup`` untimed ones, read with a device-synchronising
clock. Collective calls start after a barrier of their group, and rank 0 reports its time.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from cost_models.specs import ModelSpec
from real_runtime.attention import resolve_backend, varlen_attention
from real_runtime.model import Block, rope_cos_sin
from real_runtime.timing import Clock

COLLECTIVE_OPS = ("send_recv", "all_to_all", "all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True)
class ProfileSettings:
    """What to measure and how often."""

    attention_lengths: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
    gemm_tokens: tuple[int, ...] = (64, 256, 1024, 4096)
    layer_tokens: tuple[int, ...] = (32, 128, 512, 2048)
    collective_bytes: tuple[int, ...] = (1 << 14, 1 << 17, 1 << 20, 1 << 22)
    repeats: int = 7
    warmup: int = 1

    @staticmethod
    def quick() -> ProfileSettings:
        """A short profile (a few seconds on a CPU): fewer sizes and repeats."""
        return ProfileSettings(attention_lengths=(64, 256, 1024), gemm_tokens=(64, 512, 2048),
                               layer_tokens=(32, 128, 512), collective_bytes=(1 << 14, 1 << 18, 1 << 21), repeats=3, warmup=1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ProfileSettings:
        return ProfileSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


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


def median_seconds(fn: Callable[[], Any], clock: Clock, repeats: int, warmup: int,
                   setup: Callable[[], Any] | None = None) -> float:
    """Median time of ``fn(setup())`` (or ``fn()``) over ``repeats`` calls after ``warmup`` untimed ones."""
    times = []
    for i in range(warmup + repeats):
        arg = setup() if setup is not None else None
        t0 = clock.now()
        fn(arg) if setup is not None else fn()
        t1 = clock.now()
        if i >= warmup:
            times.append(t1 - t0)
    return max(statistics.median(times), 1e-9)


def _base_row(op: str, device: str, source: str) -> dict[str, Any]:
    return {"op": op, "kernel": "", "q_len": None, "kv_len": None, "batch": None, "heads": None,
            "kv_heads": None, "head_dim": None, "causal": None, "tokens": None, "in_features": None,
            "out_features": None, "bytes": None, "group_size": None, "link": "", "device": device,
            "seconds": None, "source": source}


def _time_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, kernel: Any,
                    clock: Clock, settings: ProfileSettings) -> tuple[float, float]:
    """Median forward and backward seconds of causal ``varlen_attention`` over one document."""
    cu = (0, q.shape[0])
    fwd = median_seconds(lambda: varlen_attention(q, k, v, cu, backend=kernel), clock, settings.repeats,
                         settings.warmup)

    def forward_for_backward() -> torch.Tensor:
        qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
        return varlen_attention(qs, ks, vs, cu, backend=kernel)

    bwd = median_seconds(lambda out: out.backward(dout), clock, settings.repeats, settings.warmup,
                         setup=forward_for_backward)
    return fwd, bwd


def profile_attention(spec: ModelSpec, lengths: Sequence[int], device: torch.device, dtype: torch.dtype,
                      settings: ProfileSettings, backend: str = "auto", source: str = "") -> list[dict[str, Any]]:
    """Causal forward and backward of one document of every length in ``lengths``."""
    clock, dev = Clock(device), device_name(device)
    rows = []
    for n in lengths:
        gen = torch.Generator(device="cpu").manual_seed(n)
        q = torch.randn(n, spec.heads, spec.head_dim, generator=gen).to(device, dtype)
        k = torch.randn(n, spec.kv_heads, spec.head_dim, generator=gen).to(device, dtype)
        v = torch.randn(n, spec.kv_heads, spec.head_dim, generator=gen).to(device, dtype)
        dout = torch.randn(n, spec.heads, spec.head_dim, generator=gen).to(device, dtype)
        kernel = resolve_backend(backend, q)
        fwd, bwd = _time_attention(q, k, v, dout, kernel, clock, settings)
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
                  settings: ProfileSettings, source: str = "") -> list[dict[str, Any]]:
    """Forward GEMMs of the layer's linear shapes at every token count."""
    clock, dev = Clock(device), device_name(device)
    rows = []
    for fin, fout in linear_shapes(spec):
        w = torch.randn(fout, fin, device=device, dtype=dtype) * 0.02
        for m in tokens:
            x = torch.randn(m, fin, device=device, dtype=dtype)
            sec = median_seconds(partial(F.linear, x, w), clock, settings.repeats, settings.warmup)
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
                 kernel: Any) -> tuple[Callable[[Any], torch.Tensor], Callable[[torch.Tensor], None]]:
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
                   settings: ProfileSettings, backend: str = "auto", source: str = "") -> list[dict[str, Any]]:
    """Forward and backward of one decoder layer over one causal document of every count in ``tokens``."""
    clock, dev = Clock(device), device_name(device)
    block = _layer(spec, device)
    kernel = resolve_backend(backend, torch.empty(1, 1, spec.head_dim, device=device, dtype=dtype))
    rows = []
    for n in tokens:
        forward, backward = _layer_calls(block, n, device, dtype, kernel)
        fwd = median_seconds(forward, clock, settings.repeats, settings.warmup)
        bwd = median_seconds(backward, clock, settings.repeats, settings.warmup, setup=forward)
        block.zero_grad(set_to_none=True)
        for op, sec in (("layer_fwd", fwd), ("layer_bwd", bwd)):
            rows.append(_base_row(op, dev, source) | {
                "kernel": kernel.name, "q_len": n, "kv_len": n, "batch": 1, "heads": spec.heads,
                "kv_heads": spec.kv_heads, "head_dim": spec.head_dim, "causal": 1, "tokens": n,
                "in_features": spec.hidden, "out_features": spec.ffn, "seconds": sec})
    return rows


def profile_compute(spec: ModelSpec, device: torch.device, dtype: torch.dtype, settings: ProfileSettings,
                    backend: str = "auto", source: str = "") -> list[dict[str, Any]]:
    """Attention, GEMM and decoder-layer rows (no process group needed)."""
    with torch.no_grad():
        gemms = profile_gemms(spec, settings.gemm_tokens, device, dtype, settings, source)
    return (profile_attention(spec, settings.attention_lengths, device, dtype, settings, backend, source) + gemms
            + profile_layers(spec, settings.layer_tokens, device, dtype, settings, backend, source))


# ---- collectives --------------------------------------------------------------------------------------------
def _group_sizes(world: int) -> list[int]:
    sizes, g = [], 2
    while g <= world:
        sizes.append(g)
        g *= 2
    return sizes


def _collective_call(op: str, nbytes: int, g: int, rank: int, pg: Any, device: torch.device,
                     dtype: torch.dtype) -> Callable[[], Any]:
    import torch.distributed as dist

    elem = torch.tensor([], dtype=dtype).element_size()
    numel = max(g, nbytes // elem // g * g)
    buf = torch.ones(numel, device=device, dtype=dtype)
    if op == "send_recv":
        peer = 1 - rank
        recv = torch.empty_like(buf)

        def call() -> None:
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, peer, pg),
                                           dist.P2POp(dist.irecv, recv, peer, pg)])
            for r in reqs:
                r.wait()
        return call
    if op == "all_to_all":
        out = torch.empty_like(buf)
        return lambda: dist.all_to_all_single(out, buf, group=pg)
    if op == "all_gather":  # the *_single names replace *_into_tensor / *_tensor in recent torch
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        part = buf[: numel // g].clone()
        return lambda: gather(buf, part, group=pg)
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        part = torch.empty(numel // g, device=device, dtype=dtype)
        return lambda: scatter(part, buf, group=pg)
    return lambda: dist.all_reduce(buf, group=pg)


def profile_collectives(sizes: Sequence[int], device: torch.device, dtype: torch.dtype, settings: ProfileSettings,
                        source: str = "", ops: Sequence[str] = COLLECTIVE_OPS) -> list[dict[str, Any]]:
    """Collectives over aligned groups of every power-of-two size (collective over the world; rows on rank 0
    only, empty elsewhere and for a world of one)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    clock, dev = Clock(device), device_name(device)
    groups = {g: dist.new_group(list(range(g))) for g in _group_sizes(world)}  # same order on every process
    rows = []
    for g, pg in groups.items():
        if rank >= g:
            continue
        link = "nvlink" if len(set(hosts[:g])) == 1 else "network"
        for op in ops:
            if op == "send_recv" and g != 2:
                continue
            for nbytes in sizes:
                call = _collective_call(op, nbytes, g, rank, pg, device, dtype)
                try:
                    times = []
                    for i in range(settings.warmup + settings.repeats):
                        dist.barrier(group=pg)
                        t0 = clock.now()
                        call()
                        t1 = clock.now()
                        if i >= settings.warmup:
                            times.append(t1 - t0)
                except RuntimeError as e:  # e.g. an op this backend does not implement: skip it everywhere
                    if rank == 0:
                        print(f"profiler: skipping {op} on {g} ranks: {str(e).splitlines()[0]}")
                    break
                if rank == 0:
                    elem = torch.tensor([], dtype=dtype).element_size()
                    real_bytes = max(g, nbytes // elem // g * g) * elem
                    rows.append(_base_row(op, dev, source) | {"bytes": real_bytes, "group_size": g, "link": link,
                                                             "seconds": max(statistics.median(times), 1e-9)})
    return rows


def to_frame(rows: list[dict[str, Any]]):
    """Rows as a DataFrame with every profile-table column (pandas imported here, not at module level)."""
    import pandas as pd

    from cost_models.profile_table import COLUMNS

    return pd.DataFrame(rows, columns=list(COLUMNS))


def write_rows(rows: list[dict[str, Any]], path: str) -> None:
    """Validate and write rows with :func:`cost_models.profile_table.write_profile`."""
    from cost_models.profile_table import write_profile

    write_profile(to_frame(rows), path)
