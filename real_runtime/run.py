"""Run a policy's plans for real: ``python -m dcpsim.real_runtime.run`` (spawns its processes) or under torchrun.

Examples::

    python -m dcpsim.real_runtime.run --policy hydra --model tiny --nproc 4 --backend gloo --iterations 2 --out run1
    python -m dcpsim.real_runtime.run --policy mcore-dcp --check           # also compare with a single-process run
    torchrun --nproc-per-node 8 -m dcpsim.real_runtime.run --policy hydra --backend nccl --device cuda \\
        --dtype bfloat16 --context-len 65536 --tokens 524288 --out run_h200

Every process builds the same synthetic batches and plans them with the policy (deterministic), the pool of
process groups is created from the plans, and every process trains (:mod:`real_runtime.runner`). Rank 0
writes to ``--out``: ``losses.csv`` (workload, iteration, loss), ``timeline.csv`` (the simulator's timeline
columns plus workload and iteration), ``session.json`` (config and plans) and ``pool.json`` (the process groups
created). PP = 1: the world is the DP×CP pool.

:func:`run_workloads` is the library entry point (used by ``dcpsim validate`` and the tests).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dcpsim.policies.spec import parse_policy_specs
from dcpsim.real_runtime.launch import LaunchError, check_dist_backend, in_torchrun, init_from_env, spawn
from dcpsim.real_runtime.options import add_run_arguments
from dcpsim.real_runtime.runner import TrainConfig, reference_losses, relative_errors
from dcpsim.real_runtime.session import measured_timelines, session_dict, session_worker
from dcpsim.real_runtime.workload import Workload, plan_workload, synthetic_batches
from dcpsim.sim.timeline import Timeline


@dataclass(frozen=True)
class RunOutput:
    """What a run wrote: per-iteration losses, the measured timeline (every workload's and iteration's rows,
    as in ``timeline.csv``), the pool's process groups."""

    losses: pd.DataFrame
    timeline: pd.DataFrame
    pool: dict[str, Any]
    out_dir: Path

    def timelines(self) -> dict[tuple[str, int], Timeline]:
        """The measured rows as one :class:`~dcpsim.sim.timeline.Timeline` per (workload label, iteration):
        what ``sim.metrics.compute_metrics`` takes."""
        return measured_timelines(self.timeline, int(self.pool["world"]))


def load_outputs(out: str | Path) -> RunOutput:
    out = Path(out)
    return RunOutput(pd.read_csv(out / "losses.csv"), pd.read_csv(out / "timeline.csv", keep_default_na=False),
                     json.loads((out / "pool.json").read_text()), out)


def run_workloads(workloads: Sequence[Workload], cfg: TrainConfig, *, nproc: int, backend: str = "gloo",
                  device: str = "cpu", out: str | Path | None = None, threads: int = 1,
                  timeout_s: float = 600.0) -> RunOutput:
    """Spawn ``nproc`` processes, train every workload on them in turn, return what rank 0 wrote to ``out``
    (a temporary directory, read back and removed, when ``out`` is None)."""
    check_dist_backend(backend, device, nproc)
    for w in workloads:
        if w.pool_size != nproc:
            raise LaunchError(f"workload {w.label!r} is planned for a pool of {w.pool_size} ranks, but {nproc} "
                              "processes were asked for (PP = 1: one process per pool rank)")
    if out is None:
        with tempfile.TemporaryDirectory(prefix="dcpsim_run_") as tmp:
            res = run_workloads(workloads, cfg, nproc=nproc, backend=backend, device=device, out=tmp,
                                threads=threads, timeout_s=timeout_s)
            return RunOutput(res.losses, res.timeline, res.pool, Path(tmp))
    Path(out).mkdir(parents=True, exist_ok=True)
    session = session_dict(workloads, cfg, device, out)
    Path(out, "session.json").write_text(json.dumps(session))
    spawn(session_worker, nproc, (session,), backend=backend, threads=threads, timeout_s=timeout_s)
    return load_outputs(out)


# ---- command line -------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dcpsim.real_runtime.run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    return p


def plan_from_args(args: argparse.Namespace, world: int) -> tuple[Workload, TrainConfig]:
    from dcpsim.cost_models import AnalyticCostModel, Calibration, JobSpec, get_gpu, get_model

    budget = args.max_tokens_per_rank or math.ceil(args.context_len / world)
    job = JobSpec(model=get_model(args.model), gpu=get_gpu(args.gpu), tp=1, pp=1, pool=world,
                  context_len=args.context_len, global_batch_tokens=args.tokens, max_tokens_per_rank=budget)
    cm = AnalyticCostModel(job, Calibration.load(args.calibration) if args.calibration else None)
    batches = synthetic_batches(args.iterations, args.tokens, args.context_len, median_len=args.median_len,
                                sigma=args.sigma, seed=args.seed)
    spec = parse_policy_specs(args.policy)[0]
    workload = plan_workload(spec.name, batches, cm, spec.options, label=args.policy)
    cfg = TrainConfig(model=args.model, seed=args.seed, optimizer=args.optimizer, lr=args.lr, dtype=args.dtype,
                      attention_backend=args.attention_backend, warmup=args.warmup)
    return workload, cfg


def report(res: RunOutput, workload: Workload, check: list[float] | None) -> None:
    tl = res.timeline
    for i, step in enumerate(workload.steps):
        t = tl[tl.iteration == i]
        sizes = sorted({g.size for mb in step.plan.microbatches for g in mb.groups})
        line = (f"iteration {i}: loss {res.losses.loss.iloc[i]:.6f}, {step.batch.num_seqs} sequences, "
                f"{step.batch.num_tokens} tokens, {step.plan.num_microbatches} microbatches, group sizes {sizes}, "
                f"{t.end.max():.3f} s")
        if check is not None:
            line += f", single-process loss {check[i]:.6f}"
        print(line)
    if check is not None:
        err = relative_errors(list(res.losses.loss), check)
        print(f"max relative loss difference to the single-process run: {err.max():.2e}")
    print(f"wrote {res.out_dir}/losses.csv, timeline.csv, pool.json, session.json "
          f"({len(res.pool['process_groups'])} process groups)")


def main(argv: Sequence[str] | None = None) -> int:
    return run_from_args(build_parser().parse_args(argv))


def run_from_args(args: argparse.Namespace) -> int:
    """Plan, run (spawned or under torchrun) and report; 2 on a user error."""
    try:
        if in_torchrun():
            return _torchrun_main(args)
        check_dist_backend(args.backend, args.device, args.nproc)
        workload, cfg = plan_from_args(args, args.nproc)
        res = run_workloads([workload], cfg, nproc=args.nproc, backend=args.backend, device=args.device,
                            out=args.out, threads=args.threads, timeout_s=args.timeout)
    except (LaunchError, ValueError) as e:
        print(f"real_runtime.run: error: {e}", file=sys.stderr)
        return 2
    check = None
    if args.check:
        import torch

        torch.set_num_threads(max(1, args.threads))
        check = reference_losses(workload, cfg, args.device)
    report(res, workload, check)
    return 0


def _torchrun_main(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    rank, world, local = init_from_env(args.backend, args.timeout)
    try:
        workload, cfg = plan_from_args(args, world)
        session = session_dict([workload], cfg, args.device, args.out)
        session["local_rank"] = local
        if rank == 0:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            Path(args.out, "session.json").write_text(json.dumps(session))
        session_worker(rank, world, session)
        dist.barrier()
        if rank == 0:
            ref = reference_losses(workload, cfg, "cuda" if args.device == "cuda" else "cpu") if args.check else None
            report(load_outputs(args.out), workload, ref)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
