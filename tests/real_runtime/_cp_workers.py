"""Multi-process harness for the CP engine tests: one spawn of ``world`` gloo processes runs every case.

Each case lists CP groups (global ranks, Ulysses degree, document lengths). All processes create the same
groups in the same order (``new_group`` is collective over the world); each member then shards a seeded
global ``q, k, v``, runs the engine forward and backward, gathers output and input gradients over its group
and compares them with the float64 single-process reference. Every rank writes its errors to
``<out_dir>/rank<r>.json``; the parent reads them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dcpsim.policies.plan import CPGroup, Engine
from dcpsim.real_runtime.attention import (
    CPComm,
    DualChunkLayout,
    cp_attention,
    gather_packed,
    new_cp_comm_for_group,
    reference_attention,
)


@dataclass(frozen=True)
class GroupCase:
    ranks: tuple[int, ...]
    ulysses: int
    lengths: tuple[int, ...]

    def plan_group(self) -> CPGroup:
        """The plan's view of this group (ids unused here): ring, Ulysses or hybrid by the Ulysses degree."""
        size = len(self.ranks)
        kind = "ring" if self.ulysses == 1 else "ulysses" if self.ulysses == size else "hybrid"
        return CPGroup(self.ranks, (), Engine.for_size(kind, size, self.ulysses))


@dataclass(frozen=True)
class Case:
    name: str
    groups: tuple[GroupCase, ...]
    heads: int
    kv_heads: int
    head_dim: int = 16
    expect_error: bool = False


DOCS = (37, 128, 5, 90)
LONG = (301,)
WORLD = (0, 1, 2, 3)

CASES: tuple[Case, ...] = (
    Case("ring4_docs", (GroupCase(WORLD, 1, DOCS),), heads=4, kv_heads=2),
    Case("ring4_long", (GroupCase(WORLD, 1, LONG),), heads=4, kv_heads=4),
    Case("ulysses4_docs", (GroupCase(WORLD, 4, DOCS),), heads=8, kv_heads=4),
    Case("ulysses4_long", (GroupCase(WORLD, 4, LONG),), heads=4, kv_heads=4),
    Case("hybrid2x2_docs", (GroupCase(WORLD, 2, DOCS),), heads=4, kv_heads=2),
    Case("hybrid2x2_long", (GroupCase(WORLD, 2, LONG),), heads=6, kv_heads=2),
    Case("ring4_tiny_docs", (GroupCase(WORLD, 1, (1, 3, 17, 8)),), heads=2, kv_heads=1),
    Case("hybrid2x2_tiny_docs", (GroupCase(WORLD, 2, (1, 3, 17, 8)),), heads=4, kv_heads=2),
    Case("two_rings_of_2", (GroupCase((0, 1), 1, (37, 64, 3)), GroupCase((2, 3), 1, (100, 9))),
         heads=4, kv_heads=2),
    Case("ulysses2_and_ring2", (GroupCase((0, 1), 2, (50, 13)), GroupCase((2, 3), 1, (77,))),
         heads=4, kv_heads=2),
    Case("ulysses4_bad_kv_heads", (GroupCase(WORLD, 4, DOCS),), heads=8, kv_heads=2, expect_error=True),
)


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _run_group(case: Case, gi: int, group: GroupCase, comm: CPComm) -> dict[str, object]:
    layout = DualChunkLayout.build(group.lengths, len(group.ranks))
    t = layout.total_tokens
    gen = torch.Generator().manual_seed(zlib.crc32(f"{case.name}/{gi}".encode()))
    q = torch.randn(t, case.heads, case.head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(t, case.kv_heads, case.head_dim, generator=gen, dtype=torch.float64)
    v = torch.randn(t, case.kv_heads, case.head_dim, generator=gen, dtype=torch.float64)
    dout = torch.randn(t, case.heads, case.head_dim, generator=gen, dtype=torch.float64)
    inputs = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = reference_attention(*inputs, layout.cu_seqlens)
    ref.backward(dout)
    shards = [layout.shard(x.float(), comm.rank).requires_grad_() for x in (q, k, v)]
    try:
        out = cp_attention(*shards, layout, comm)
    except ValueError as e:
        return {"raised": f"{type(e).__name__}: {e}"}
    out.backward(layout.shard(dout.float(), comm.rank))
    result: dict[str, object] = {"out": _max_err(gather_packed(out.detach(), layout, comm), ref.detach())}
    for name, shard, full in zip(("dq", "dk", "dv"), shards, inputs):
        result[name] = _max_err(gather_packed(shard.grad, layout, comm), full.grad)
    result["local_tokens"] = layout.local_tokens
    return result


def _worker(rank: int, world: int, out_dir: str, store_path: str) -> None:
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    results: dict[str, object] = {}
    comms: dict[tuple[tuple[int, ...], int], CPComm | None] = {}
    try:
        for case in CASES:
            t0 = time.perf_counter()
            for group in case.groups:  # identical creation order on every process
                key = (group.ranks, group.ulysses)
                if key not in comms:
                    comms[key] = new_cp_comm_for_group(group.plan_group())
            for gi, group in enumerate(case.groups):
                comm = comms[(group.ranks, group.ulysses)]
                if comm is None:
                    continue
                try:
                    res = _run_group(case, gi, group, comm)
                except Exception:  # noqa: BLE001 - reported to the parent, which fails the test
                    res = {"error": traceback.format_exc()}
                res["seconds"] = time.perf_counter() - t0
                results[case.name] = res
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()


def run_cases(world: int = 4, timeout_s: float = 120.0) -> dict[str, dict[int, dict[str, object]]]:
    """Spawn ``world`` processes, run every case, return ``{case: {rank: result}}``."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        store_path = str(Path(tmp, "store"))
        procs = [ctx.Process(target=_worker, args=(r, world, tmp, store_path), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [i for i, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        out: dict[str, dict[int, dict[str, object]]] = {}
        for r in range(world):
            path = Path(tmp, f"rank{r}.json")
            data = json.loads(path.read_text()) if path.exists() else {}
            for name, res in data.items():
                out.setdefault(name, {})[r] = res
        if hung:
            raise RuntimeError(f"CP test workers {hung} did not finish within {timeout_s} s")
        bad_exit = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode != 0]
        if bad_exit:
            raise RuntimeError(f"CP test workers exited abnormally: {bad_exit}")
        return out
