"""Run one policy's plans for real on this machine's CPUs or GPUs (the same as python -m dcpsim.real_runtime.run).

Synthetic global batches of short lognormal documents are planned with the policy (the pool is --nproc ranks,
PP = 1) and a small Llama-style model trains on them for --iterations steps on --nproc spawned processes
(torch.distributed, gloo or NCCL). Writes losses.csv, timeline.csv (the simulator's schema), session.json
and pool.json to --out. Needs torch. On a cluster use torchrun with python -m dcpsim.real_runtime.run instead.

Examples:
  dcpsim run-real --policy hydra --nproc 4 --iterations 2 --check
  dcpsim run-real --policy mcore-dcp --backend nccl --device cuda --nproc 8 --dtype bfloat16 \\
      --context-len 32768 --tokens 262144 --out run_h200
"""

from __future__ import annotations

import argparse

from dcpsim.experiments.errors import ScenarioError
from dcpsim.real_runtime.options import add_run_arguments

NAME = "run-real"
HELP = "run a policy's plans for real with torch.distributed (gloo on CPUs, NCCL on GPUs)"
ORDER = 61


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ScenarioError("dcpsim run-real needs torch: pip install -e '.[runtime]'") from None
    from dcpsim.real_runtime.run import run_from_args

    return run_from_args(args)
