"""Starting a torch.distributed world: under ``torchrun``, or by spawning processes on this machine.

* Under ``torchrun`` (the environment has ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``), every
  process calls :func:`init_from_env` and runs its part; this is how a GPU cluster runs (NCCL, one process
  per GPU, any number of nodes).
* Otherwise :func:`spawn` starts ``nproc`` processes on this machine, rendezvous through a ``FileStore`` in a
  temporary directory (gloo binds to the loopback interface unless ``GLOO_SOCKET_IFNAME`` says otherwise),
  runs a module-level function on each and waits for all of them. A failing process writes its traceback
  to a file, and :func:`spawn` raises :class:`LaunchError` with it.

Start method: ``forkserver`` where the platform has it, else ``spawn``. Importing torch costs seconds of CPU
per process; the fork server imports it once (single-threaded: OpenMP and BLAS pools are not started in it,
so forking from it is safe), and every later process of this program is forked from it already loaded. The
processes inherit the server's environment, fixed when the first one starts.

Device: ``cpu`` or ``cuda``; with CUDA every process uses GPU ``local_rank mod device_count`` (with fewer GPUs
than processes they share; NCCL needs one process per GPU, so use gloo then).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dcpsim.real_runtime.options import BACKENDS


class LaunchError(RuntimeError):
    """A worker process failed, hung, or the requested world cannot be started here."""


def in_torchrun() -> bool:
    """Whether this process was started by torchrun (or another launcher that sets the env:// variables)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))


def check_dist_backend(backend: str, device: str, nproc: int) -> None:
    """Raise :class:`LaunchError` for combinations that cannot run here."""
    if backend not in BACKENDS:
        raise LaunchError(f"backend {backend!r} is unknown; valid: {', '.join(BACKENDS)}")
    if device not in ("cpu", "cuda"):
        raise LaunchError(f"device {device!r} is unknown; valid: cpu, cuda")
    if not dist.is_available():
        raise LaunchError("this torch build has no torch.distributed")
    if backend == "gloo" and not dist.is_gloo_available():
        raise LaunchError("backend gloo is not available in this torch build")
    if backend == "nccl":
        if device != "cuda" or not torch.cuda.is_available() or not dist.is_nccl_available():
            raise LaunchError("backend nccl needs CUDA GPUs and an NCCL-enabled torch; use --backend gloo on CPUs")
        if not in_torchrun() and nproc > torch.cuda.device_count():
            raise LaunchError(f"nccl needs one GPU per process: {nproc} processes, "
                              f"{torch.cuda.device_count()} GPU(s); use fewer processes or --backend gloo")
    if device == "cuda" and not torch.cuda.is_available():
        raise LaunchError("device cuda requested but torch sees no CUDA GPU")
    if backend == "gloo" and device == "cuda" and nproc > 1:
        raise LaunchError("gloo cannot send CUDA tensors point to point (the ring engine needs it): use "
                          "--backend nccl with one GPU per process, or --device cpu")


def local_device(device: str, local_rank: int) -> torch.device:
    """This process's device; sets the current CUDA device."""
    if device == "cuda":
        idx = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def init_from_env(backend: str, timeout_s: float = 600.0) -> tuple[int, int, int]:
    """``init_process_group`` from torchrun's environment; returns (rank, world, local rank)."""
    local = int(os.environ["LOCAL_RANK"])
    if backend == "nccl":
        torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size(), local


_PRELOAD = ["torch", "torch.distributed", "numpy"]
_SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def mp_context(method: str | None = None) -> Any:
    """The multiprocessing context of :func:`spawn` (see module doc); starts the fork server if needed."""
    method = method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    ctx = mp.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        ctx.set_forkserver_preload(_PRELOAD)
        saved = {k: os.environ.get(k) for k in _SINGLE_THREAD_ENV}
        os.environ.update(_SINGLE_THREAD_ENV)
        try:
            forkserver.ensure_running()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return ctx


def _entry(fn: Callable[..., Any], rank: int, world: int, backend: str, store_path: str, err_dir: str,
           threads: int, timeout_s: float, args: tuple[Any, ...]) -> None:
    torch.set_num_threads(max(1, threads))
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ["LOCAL_RANK"] = str(rank)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        store = dist.FileStore(store_path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        fn(rank, world, *args)
    except BaseException:
        Path(err_dir, f"rank{rank}.txt").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable[..., Any], nproc: int, args: tuple[Any, ...] = (), *, backend: str = "gloo",
          threads: int = 1, timeout_s: float = 600.0, start_method: str | None = None) -> None:
    """Run ``fn(rank, world, *args)`` on ``nproc`` new processes of one gloo/NCCL world and wait.

    ``fn`` must be a module-level function and ``args`` picklable. ``threads`` is each process's torch
    intra-op thread count; ``start_method`` ``forkserver`` (default where available) or ``spawn``. Raises
    :class:`LaunchError` if a process fails or runs past ``timeout_s``.
    """
    if nproc < 1:
        raise LaunchError(f"nproc must be ≥ 1, got {nproc}")
    ctx = mp_context(start_method)
    with tempfile.TemporaryDirectory(prefix="dcpsim_launch_") as tmp:
        store = str(Path(tmp, "store"))
        procs = [ctx.Process(target=_entry, args=(fn, r, nproc, backend, store, tmp, threads, timeout_s, args),
                             daemon=False) for r in range(nproc)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        failed_at: float | None = None
        while any(p.is_alive() for p in procs):
            if time.monotonic() > deadline:
                break
            if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
                failed_at = time.monotonic()  # give the others a moment to report, then stop them
            if failed_at is not None and time.monotonic() - failed_at > 5.0:
                break
            time.sleep(0.05)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        errors = sorted(Path(tmp).glob("rank*.txt"))
        if errors:
            first = errors[0]
            raise LaunchError(f"worker {first.stem} failed:\n{first.read_text()}")
        bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
        if hung and failed_at is None:
            raise LaunchError(f"workers {hung} did not finish within {timeout_s:.0f} s")
        if bad:
            raise LaunchError(f"workers exited abnormally (rank, exit code): {bad}")
