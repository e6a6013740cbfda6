"""Command-line options of ``python -m dcpsim.real_runtime.run`` (and ``dcpsim run-real``), importable without torch.

The ``dcpsim`` CLI builds every sub-command's parser at start-up; keeping these definitions free of torch
means ``dcpsim --help`` does not pay for importing it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dcpsim.policies.registry import OptionType

BACKENDS = ("gloo", "nccl")
DEVICES = ("cpu", "cuda")
DTYPE_NAMES = ("float32", "bfloat16", "float64")
OPTIMIZERS = ("sgd", "adamw")


def _num(base: type, *, ge: float | None = None, gt: float | None = None) -> Callable[[str], Any]:
    """argparse type checked like a policy option: '--nproc 0' is one line, not a traceback later."""
    return OptionType(base, ge=ge, gt=gt).arg_type()


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a real run: policy, model, processes, workload, training, output."""
    p.add_argument("--policy", default="mcore-dcp", metavar="NAME[:k=v]",
                   help="registered policy, with options as name:key=value (default mcore-dcp)")
    p.add_argument("--model", default="tiny", help="model preset (default tiny)")
    p.add_argument("--gpu", default="h200", help="GPU preset of the planning cost model (default h200)")
    p.add_argument("--calibration", metavar="JSON", help="calibration for the planning cost model")
    p.add_argument("--nproc", type=_num(int, ge=1), default=4,
                   help="processes = pool ranks when not under torchrun (default 4)")
    p.add_argument("--backend", choices=BACKENDS, default="gloo")
    p.add_argument("--device", choices=DEVICES, default="cpu")
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32",
                   help="bfloat16 runs the model under autocast with float32 weights (default float32)")
    p.add_argument("--iterations", type=_num(int, ge=1), default=2)
    p.add_argument("--tokens", type=_num(int, ge=2), default=4096, help="tokens per global batch (default 4096)")
    p.add_argument("--context-len", type=_num(int, ge=2), default=1024, help="longest document (default 1024)")
    p.add_argument("--max-tokens-per-rank", type=_num(int, ge=1),
                   help="per-rank token budget of a microbatch (default: context-len / pool)")
    p.add_argument("--median-len", type=_num(float, gt=0.0), default=200.0, help="median document length (default 200)")
    p.add_argument("--sigma", type=_num(float, ge=0.0), default=1.0,
                   help="lognormal sigma of document lengths (default 1.0)")
    p.add_argument("--seed", type=_num(int, ge=0), default=0, help="seed of the batches, the data and the weights")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    p.add_argument("--lr", type=_num(float, gt=0.0), default=0.05)
    p.add_argument("--attention-backend", default="auto", help="auto, math or flash (default auto)")
    p.add_argument("--warmup", type=_num(int, ge=0), default=0,
                   help="untimed forward/backward passes before iteration 0")
    p.add_argument("--threads", type=_num(int, ge=1), default=1,
                   help="torch threads per process when spawning (default 1)")
    p.add_argument("--check", action="store_true", help="compare the losses with a single-process run")
    p.add_argument("--out", default="real_run", help="output directory (default real_run)")
    p.add_argument("--timeout", type=_num(float, gt=0.0), default=600.0, help="seconds before a hung run is stopped")
