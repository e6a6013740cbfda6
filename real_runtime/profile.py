"""Profile this machine into a profile table: ``python -m dcpsim.real_runtime.profile --out profile.csv``.

Examples::

    python -m dcpsim.real_runtime.profile --out cpu.csv --quick                      # compute only, one process
    python -m dcpsim.real_runtime.profile --out cpu.csv --quick --nproc 4            # + gloo collectives, 4 processes
    python -m dcpsim.real_runtime.profile --out h200.csv --device cuda --model llama3-8b --nproc 8 --backend nccl
    torchrun --nproc-per-node 8 -m dcpsim.real_runtime.profile --out h200.csv --device cuda --backend nccl

Then ``dcpsim calibrate profile.csv -o cal.json --gpu h200`` fits a calibration. The table's schema is that of
:mod:`cost_models.profile_table`; what is measured is described in :mod:`real_runtime.profiler`. With several
processes, the compute profile's layout is ``concurrent`` by default: every process times the same ops at the
same time, each measurement after a barrier, and the processes' times are averaged (on a GPU node each has its
own GPU; on a CPU host with fewer cores than processes this puts a run's contention for the cores into the
measurement); ``--layout alone`` times compute on rank 0 while the others wait. Then all of them time the
collectives. The profile's ``source`` column says which layout and statistic were used.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dcpsim.real_runtime.launch import LaunchError, check_dist_backend, in_torchrun, init_from_env, spawn
from dcpsim.real_runtime.options import BACKENDS
from dcpsim.real_runtime.profile_timing import LAYOUTS
from dcpsim.real_runtime.profiler import ProfileSettings

DTYPE_NAMES = ("float32", "bfloat16")


def _dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def profile_worker(rank: int, world: int, job: dict[str, Any]) -> None:
    """One process of a profile run (collective when ``world > 1``); rank 0 writes ``job["out"]``."""
    from dcpsim.cost_models.presets import get_model
    from dcpsim.real_runtime.launch import local_device
    from dcpsim.real_runtime.profile_timing import describe, mean_over_processes
    from dcpsim.real_runtime.profiler import layer_burst, profile_compute, write_rows
    from dcpsim.real_runtime.profiler_comm import profile_collectives, profile_ring

    settings = ProfileSettings.from_dict(job["settings"])
    device = local_device(job["device"], int(job.get("local_rank", rank)))
    dtype = _dtype(job["dtype"])
    layout = settings.layout if world > 1 else "alone"
    source = (f"real_runtime.profiler ({job['backend']}, {job['dtype']}, {world} process(es); "
              f"{describe(layout, world, settings.repeats, settings.window_s)})")
    spec, attention = get_model(job["model"]), job.get("attention_backend", "auto")
    if world == 1:
        rows = profile_compute(spec, device, dtype, settings, attention, source)
    else:
        import torch.distributed as dist

        together = layout == "concurrent"
        rows = (profile_compute(spec, device, dtype, settings, attention, source,
                                sync=dist.barrier if together else None) if together or rank == 0 else [])
        if together:
            gathered: list[Any] | None = [None] * world if rank == 0 else None
            dist.gather_object(rows, gathered, dst=0)
            rows = mean_over_processes(gathered) if gathered is not None else []
        else:
            dist.barrier()
        burst = layer_burst(spec, sorted(settings.layer_tokens)[len(settings.layer_tokens) // 2], device, dtype,
                            attention) if together else None
        rows += profile_collectives(settings.collective_bytes, device, dtype, settings, source, burst=burst)
        rows += profile_ring(spec, settings.layer_tokens, device, dtype, settings, source, attention)
    if rank == 0:
        write_rows(rows, job["out"])


def profile_job(out: str, *, model: str = "tiny", device: str = "cpu", dtype: str | None = None,
                backend: str = "gloo", quick: bool = False, attention_backend: str = "auto",
                layout: str = "concurrent") -> dict[str, Any]:
    """The picklable description of a profile run (``dtype`` default: bfloat16 on CUDA, float32 on CPU;
    ``layout`` of the compute profile with several processes: ``concurrent`` or ``alone``)."""
    settings = replace(ProfileSettings.quick() if quick else ProfileSettings(), layout=layout)
    return {"out": str(out), "model": model, "device": device, "backend": backend,
            "dtype": dtype or ("bfloat16" if device == "cuda" else "float32"), "settings": settings.to_dict(),
            "attention_backend": attention_backend}


def run_profile(job: dict[str, Any], nproc: int = 1, threads: int = 1, timeout_s: float = 600.0) -> None:
    """Profile in this process (``nproc == 1``, compute only) or on ``nproc`` spawned processes."""
    if nproc <= 1:
        import torch

        torch.set_num_threads(max(1, threads))
        profile_worker(0, 1, job)
        return
    check_dist_backend(job["backend"], job["device"], nproc)
    spawn(profile_worker, nproc, (job,), backend=job["backend"], threads=threads, timeout_s=timeout_s)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dcpsim.real_runtime.profile", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the profile CSV to write")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=DTYPE_NAMES, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--model", default="tiny", help="model preset whose shapes are profiled (default tiny)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (seconds on a CPU)")
    p.add_argument("--nproc", type=int, default=1, help="processes (>1 also profiles collectives; default 1)")
    p.add_argument("--backend", choices=BACKENDS, default="gloo")
    p.add_argument("--attention-backend", default="auto", help="auto, math or flash (default auto)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--layout", choices=LAYOUTS, default="concurrent",
                   help="compute profile with several processes: all at once (concurrent, default: the "
                        "contention of a run) or rank 0 alone")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    job = profile_job(args.out, model=args.model, device=args.device, dtype=args.dtype, backend=args.backend,
                      quick=args.quick, attention_backend=args.attention_backend, layout=args.layout)
    try:
        if in_torchrun():
            import torch.distributed as dist

            rank, world, local = init_from_env(args.backend)
            try:
                profile_worker(rank, world, dict(job, local_rank=local))
            finally:
                dist.destroy_process_group()
            if rank != 0:
                return 0
        else:
            run_profile(job, args.nproc, args.threads)
    except (LaunchError, ValueError) as e:
        print(f"real_runtime.profile: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
