"""Collective profiles: ``send_recv``, ``all_to_all``, ``all_gather``, ``reduce_scatter``, ``all_reduce``, and
one layer's ring CP attention (``ring_fwd``, ``ring_bwd``: :func:`profile_ring`).

Rows follow the profile-table schema (:mod:`cost_models.profile_table`): ``bytes`` as nccl-tests counts them
(the total buffer: all_gather's output, reduce_scatter's input, the all-to-all's per-rank buffer, the
send/recv message), ``group_size``, and ``link`` = ``nvlink`` when the group's processes share a host (the
schema's name for "inside a node"), else ``network``. ``send_recv`` is a pair exchanging buffers both ways at
once, as a ring step does. An operation the backend lacks is skipped, not faked.

Two layouts (the compute profile's, :mod:`real_runtime.profile_timing`):

* ``alone`` — only the aligned group ``0..g-1`` of each power-of-two size ``g`` runs; every call starts after
  a barrier of the group; the time is the median of ``repeats`` calls; rank 0 reports. This is the link on
  an otherwise idle machine.
* ``concurrent`` — as a run uses the machine: *every* aligned group of size ``g`` runs at once (all processes
  busy). Before each call of a CP collective (:data:`CP_OPS`) every process does a compute *burst* (one
  decoder layer's forward, the work a CP rank does between two synchronisations), as a CP group alternates
  compute and communication; the timed call then also holds the wait for the group's slowest member to
  finish its burst — on a GPU node that is small, on a CPU host with fewer cores than processes it is the
  scheduler's time slice a run's CP groups wait for at every step. The gradient-sync collectives run once
  all ranks are ready (the simulator charges the wait for them as idle time), so their calls start after a
  barrier of the group instead. The time is the median of ``max(repeats, 8)`` calls (a median: on a loaded
  host one preempted call in a handful moves a mean by more than the bytes do, and then no bandwidth can be
  fitted), averaged over all processes.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from dcpsim.real_runtime.profiler import ProfileSettings, device_name, profile_row
from dcpsim.real_runtime.timing import Clock

COLLECTIVE_OPS = ("send_recv", "all_to_all", "all_gather", "reduce_scatter", "all_reduce")
RING_OPS = ("ring_fwd", "ring_bwd")
CP_OPS = ("send_recv", "all_to_all")
"""Collectives a CP group runs between compute steps (the others sync gradients once all ranks are ready)."""
CONCURRENT_MIN_CALLS = 8


def group_sizes(world: int) -> list[int]:
    """Power-of-two group sizes from 2 to ``world``."""
    sizes, g = [], 2
    while g <= world:
        sizes.append(g)
        g *= 2
    return sizes


def _numel(nbytes: int, g: int, dtype: torch.dtype) -> int:
    elem = torch.tensor([], dtype=dtype).element_size()
    return max(g, nbytes // elem // g * g)


def collective_call(op: str, nbytes: int, g: int, rank: int, pg: Any, device: torch.device,
                    dtype: torch.dtype) -> Callable[[], Any]:
    """One call of ``op`` on process group ``pg`` (``g`` ranks, this process global rank ``rank``)."""
    numel = _numel(nbytes, g, dtype)
    buf = torch.ones(numel, device=device, dtype=dtype)
    if op == "send_recv":
        peer = rank ^ 1  # the other member of this aligned pair, as a global rank
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


def _times(call: Callable[[], Any], clock: Clock, n: int, warmup: int, before: Callable[[], Any]) -> list[float]:
    times = []
    for i in range(warmup + n):
        before()
        t0 = clock.now()
        call()
        dt = clock.now() - t0
        if i >= warmup:
            times.append(dt)
    return times


def profile_ring(spec: Any, tokens: Sequence[int], device: torch.device, dtype: torch.dtype,
                 settings: ProfileSettings, source: str = "", attention: str = "auto") -> list[dict[str, Any]]:
    """One layer's ring CP attention (``ring_fwd``, ``ring_bwd``: the rows cost_models.fitting turns into the
    fixed per-ring-step cost) on the aligned group 0..g-1 of every power-of-two size g ≥ 2: one causal
    document of n tokens with the model's heads, each member holding its dual-chunk shard; forward alone and
    backward alone, the median of ``repeats`` calls, each after a barrier of the group; rank 0 reports.
    Collective over the world; the other processes wait."""
    from dcpsim.real_runtime.attention import DualChunkLayout, cp_attention, new_cp_comm, resolve_backend

    rank, world = dist.get_rank(), dist.get_world_size()
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    clock, dev = Clock(device), device_name(device)
    rows: list[dict[str, Any]] = []
    for g in group_sizes(world):
        comm = new_cp_comm(list(range(g)))  # collective over the world, as every new_group
        pg = dist.new_group(list(range(g)))
        if comm is None:
            continue
        link = "nvlink" if len(set(hosts[:g])) == 1 else "network"
        for n in tokens:
            layout = DualChunkLayout.build([n], g)
            gen = torch.Generator().manual_seed(n)
            full = [torch.randn(layout.total_tokens, h, spec.head_dim, generator=gen).to(device, dtype)
                    for h in (spec.heads, spec.kv_heads, spec.kv_heads)]
            q, k, v = (layout.shard(t, comm.rank) for t in full)
            kernel = resolve_backend(attention, q)
            dout = torch.ones_like(q)

            def fwd(q=q, k=k, v=v, layout=layout, kernel=kernel, comm=comm):
                with torch.no_grad():
                    cp_attention(q, k, v, layout, comm, backend=kernel)

            def bwd(q=q, k=k, v=v, layout=layout, kernel=kernel, dout=dout, comm=comm, pg=pg):
                qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
                out = cp_attention(qs, ks, vs, layout, comm, backend=kernel)
                dist.barrier(group=pg)
                t0 = clock.now()
                out.backward(dout)
                return clock.now() - t0

            barrier = partial(dist.barrier, group=pg)
            t_fwd = statistics.median(_times(fwd, clock, settings.repeats, settings.warmup, barrier))
            t_bwd = statistics.median([bwd() for _ in range(settings.warmup + settings.repeats)][settings.warmup:])
            for op, sec in (("ring_fwd", t_fwd), ("ring_bwd", t_bwd)):
                rows.append(profile_row(op, dev, source, kernel=kernel.name, tokens=n, heads=spec.heads,
                                        kv_heads=spec.kv_heads, head_dim=spec.head_dim, group_size=g, link=link,
                                        seconds=max(sec, 1e-9)))
    return rows if rank == 0 else []


def profile_collectives(sizes: Sequence[int], device: torch.device, dtype: torch.dtype, settings: ProfileSettings,
                        source: str = "", ops: Sequence[str] = COLLECTIVE_OPS,
                        burst: Callable[[], Any] | None = None) -> list[dict[str, Any]]:
    """Collectives over aligned groups of every power-of-two size, in ``settings.layout`` (module doc; the
    concurrent layout needs ``burst``, else it runs without one). Collective over the world; the rows come
    back on rank 0, empty elsewhere and for a world of one."""
    rank, world = dist.get_rank(), dist.get_world_size()
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    clock, dev = Clock(device), device_name(device)
    together = settings.layout == "concurrent"
    pgs: dict[int, Any] = {}
    for g in group_sizes(world):  # the same new_group calls in the same order on every process
        for first in range(0, world if together else g, g):
            pg = dist.new_group(list(range(first, first + g)))
            if first <= rank < first + g:
                pgs[g] = pg
    rows: list[dict[str, Any]] = []
    for g in group_sizes(world):
        if g not in pgs:
            continue
        first = rank // g * g
        link = "nvlink" if len(set(hosts[first:first + g])) == 1 else "network"
        for op in ops:
            if op == "send_recv" and g != 2:
                continue
            for nbytes in sizes:
                call = collective_call(op, nbytes, g, rank, pgs[g], device, dtype)
                try:
                    if together:
                        dist.barrier()
                        before = burst if burst is not None and op in CP_OPS else partial(dist.barrier, group=pgs[g])
                        times = _times(call, clock, max(settings.repeats, CONCURRENT_MIN_CALLS), settings.warmup,
                                       before)
                        sec = statistics.median(times)
                    else:
                        times = _times(call, clock, settings.repeats, settings.warmup,
                                       partial(dist.barrier, group=pgs[g]))
                        sec = statistics.median(times)
                except RuntimeError as e:  # e.g. an op this backend does not implement: skip it everywhere
                    if rank == 0:
                        print(f"profiler: skipping {op} on {g} ranks: {str(e).splitlines()[0]}")
                    break
                rows.append(profile_row(op, dev, source, bytes=_numel(nbytes, g, dtype) * dtype.itemsize,
                                        group_size=g, link=link, seconds=max(sec, 1e-9)))
    if together and world > 1:
        from dcpsim.real_runtime.profile_timing import mean_over_processes

        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(rows, gathered, dst=0)
        return mean_over_processes(gathered) if gathered is not None else []
    return rows if rank == 0 else []
